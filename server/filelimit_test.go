package server

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Client connections get what the process's file limit leaves after the
// node's own files, so that a client holding connections can never make
// the state machine fail to open a segment (which stops the node).
func TestConnectionsFitTheFileLimit(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	log := hclog.NewNullLogger()
	room := int(lim.Cur) - 1024 - filesForRaftAndMore
	if got := fitConns(room, 1024, log); got != room {
		t.Fatalf("exactly the room: %d connections, want %d", got, room)
	}
	if got := fitConns(room+1, 1024, log); got != room {
		t.Fatalf("one over the room: %d connections, want %d", got, room)
	}
	if got := fitConns(10, 1024, log); got != 10 {
		t.Fatalf("well under: %d connections, want 10", got)
	}
	if got := fitConns(1<<20, int(lim.Cur), log); got != 16 {
		t.Fatalf("no room at all: %d connections, want the floor of 16", got)
	}
}
