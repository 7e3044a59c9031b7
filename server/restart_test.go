package server

import (
	"context"
	"testing"
	"time"
)

// Every new leader proposes a barrier, which Raft's snapshot index counts
// and the state machine never sees: a node's own newest snapshot is then
// ahead of its checkpoint. A restart must not restore it, so a node whose
// disk has no room for a second copy of its data still starts.
func TestRestartAfterBarriersRestoresNothing(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) {
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
		c.MinFreeDisk, c.FSM.DiskReserve = 1<<20, 1<<20
	})
	waitLeader(t, n)
	waitIdentity(t, n) // the new leader's own entries are in
	sendAcked(t, []string{n.ClientAddr()}, "orders", 20)
	for range 3 {
		if err := n.barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	applied := n.fsm.Applied()
	if last := n.raft.LastIndex(); last <= applied {
		t.Fatalf("Raft's last index %d is not past the state machine's %d: no barrier counted", last, applied)
	}
	cfg := n.cfg
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// 32 MiB free: enough to apply, not for a restore (the files and 64 MiB).
	cfg.FSM.DiskFree = func(string) (int64, error) { return 32 << 20, nil }
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("restart on a disk without room for a second copy: %v", err)
	}
	defer r.Close()
	if got := r.fsm.Applied(); got != applied {
		t.Fatalf("restarted at applied index %d, want %d", got, applied)
	}
	waitLeader(t, r)
}
