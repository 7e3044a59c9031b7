package server

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The fence waits for a heartbeat being handled before it returns (the
// stores are closed after it), and a heartbeat after it is refused
// without reaching Raft.
func TestHeartbeatFence(t *testing.T) {
	f := &heartbeatFence{}
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	h := f.guard(func(rpc raft.RPC) {
		calls++
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil)
	})
	resp := make(chan raft.RPCResponse, 1)
	rpc := raft.RPC{RespChan: resp}
	go h(rpc)
	<-entered
	fenced := make(chan struct{})
	go func() { f.fence(); close(fenced) }()
	select {
	case <-fenced:
		t.Fatal("the fence returned while a heartbeat was being handled")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-fenced
	if r := <-resp; r.Error != nil {
		t.Fatalf("the heartbeat under way was answered %v", r.Error)
	}
	lateResp := make(chan raft.RPCResponse, 1)
	h(raft.RPC{RespChan: lateResp})
	if r := <-lateResp; r.Error != raft.ErrTransportShutdown || calls != 1 {
		t.Fatalf("a heartbeat after the fence: answered %v, handler called %d times", r.Error, calls)
	}
}
