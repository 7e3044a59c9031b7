package server

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A sync that fails while a snapshot persists its checkpoint (the only
// report of a lost write-back) stops the node, as a failed write does;
// Raft's failed snapshot is no passing failure to retry later.
func TestLostWriteBackStopsTheNode(t *testing.T) {
	var fail atomic.Bool
	n := startNode(t, "n1", true, func(c *Config) {
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
		c.FSM.SyncFault = func() error {
			if fail.Load() {
				return syscall.EIO
			}
			return nil
		}
	})
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 10)
	fail.Store(true)
	if err := n.raft.Snapshot().Error(); err == nil {
		t.Fatal("a snapshot whose sync failed succeeded")
	}
	select {
	case <-n.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop after its checkpoint's sync failed")
	}
	if err := n.FailedErr(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("FailedErr = %v, want EIO", err)
	}
}
