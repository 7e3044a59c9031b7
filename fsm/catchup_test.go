package fsm

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/logs"
)

// A node that stored a snapshot received from its leader but crashed before
// Restore finished must restore it on start: Raft resumes after the
// snapshot's index and would never replay the entries in between.
func TestCatchUpRestoresNewerSnapshot(t *testing.T) {
	leader := unitFSM(t)
	for i := uint64(1); i <= 5; i++ {
		applyAt(leader, i, &Append{Now: 1000, Messages: []*logs.Message{unitMsg(string(rune('a'+i)), "s", 10)}})
	}
	snap, err := leader.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()

	// The follower's store holds the leader's snapshot as a received stream.
	store, err := NewSnapshotStore(t.TempDir(), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(raft.SnapshotVersionMax, 5, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeStream(sink, snap.(*fsmSnapshot).manifest, snap.(*fsmSnapshot).open); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}

	follower := unitFSM(t)
	if err := follower.CatchUp(store); err != nil {
		t.Fatal(err)
	}
	if follower.Applied() != 5 {
		t.Fatalf("Applied = %d after CatchUp, want 5", follower.Applied())
	}
	m, err := follower.Message("s", 4)
	if err != nil || m.ID != "f" {
		t.Fatalf("Message(s, 4) = %v, %v", m, err)
	}
	// Already caught up: a second call changes nothing.
	if err := follower.CatchUp(store); err != nil || follower.Applied() != 5 {
		t.Fatalf("second CatchUp: %v, applied %d", err, follower.Applied())
	}
}
