package server

import (
	"sync"

	"github.com/hashicorp/raft"
)

// heartbeatFence is the Raft transport a group's Raft is given: it lets
// the group close its log store only once no heartbeat is being handled.
// hashicorp/raft handles a heartbeat on the connection's goroutine, not
// its own (the fast path of NetworkTransport), and such a handler that
// began just before Raft shut down went on to save the leader's term in
// a store already closed, and panicked ("failed to save current term:
// closed"). fence waits for the handlers under way, and the ones after it
// are refused as if the transport were shut down.
type heartbeatFence struct {
	*raft.NetworkTransport

	mu     sync.RWMutex
	fenced bool
}

// SetHeartbeatHandler installs cb behind the fence.
func (f *heartbeatFence) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		f.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	f.NetworkTransport.SetHeartbeatHandler(f.guard(cb))
}

// guard returns cb, run only before the fence.
func (f *heartbeatFence) guard(cb func(raft.RPC)) func(raft.RPC) {
	return func(rpc raft.RPC) {
		f.mu.RLock()
		defer f.mu.RUnlock()
		if f.fenced {
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
		cb(rpc)
	}
}

// fence waits until no heartbeat is being handled, and refuses every
// later one: the stores may be closed after it returns.
func (f *heartbeatFence) fence() {
	f.mu.Lock()
	f.fenced = true
	f.mu.Unlock()
}
