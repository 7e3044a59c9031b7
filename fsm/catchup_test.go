package fsm

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/message"
)

// A node that stored a snapshot received from its leader but crashed before
// Restore finished must restore it on start: Raft resumes after the
// snapshot's index and would never replay the entries in between.
func TestCatchUpRestoresNewerSnapshot(t *testing.T) {
	leader := unitFSM(t)
	for i := uint64(1); i <= 5; i++ {
		applyAt(leader, i, &Append{Now: 1000, Messages: []*message.Message{unitMsg(string(rune('a'+i)), "s", 10)}})
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
	if err := snapshot.Write(sink, snap.(*fsmSnapshot).manifest, snap.(*fsmSnapshot).open); err != nil {
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

// Raft's snapshot index counts entries that never reach the state machine
// (barriers, no-ops, configuration changes), so a node's own newest
// snapshot has a larger index than its checkpoint. A restart must not take
// that for being behind: it would copy all its data at every start, and
// on a disk without room for a second copy it could not start at all.
func TestCatchUpSkipsOwnSnapshotAheadOnlyByBarriers(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	for i := uint64(1); i <= 5; i++ {
		applyAt(f, i, &Append{Now: 1000, Messages: []*message.Message{unitMsg(string(rune('a'+i)), "s", 10)}})
	}
	store, err := NewSnapshotStore(t.TempDir(), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	// Entries 6 and 7 were barriers: Raft snapshots at 7, the checkpoint says 5.
	persistSnapshotAt(t, f, store, 7)
	f.Close()

	cfg.DiskFree = func(string) (int64, error) { return 1 << 20, nil } // no room for a second copy
	var restores countingLogger
	cfg.Logger = restores.logger()
	g := unitOpen(t, cfg)
	if err := g.CatchUp(store); err != nil {
		t.Fatalf("CatchUp of a node whose snapshot is ahead only by barriers: %v", err)
	}
	if g.Applied() != 5 || restores.n.Load() != 0 {
		t.Fatalf("Applied = %d after CatchUp, %d restores; want 5 and none", g.Applied(), restores.n.Load())
	}
}

// persistSnapshotAt takes f's snapshot and persists it into store under
// Raft index index, as Raft does.
func persistSnapshotAt(tb testing.TB, f *FSM, store *snapshot.Store, index uint64) {
	tb.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatal(err)
	}
	defer snap.Release()
	sink, err := store.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		tb.Fatal(err)
	}
}

// countingLogger counts the FSM's "restored snapshot" lines.
type countingLogger struct{ n atomic.Int64 }

func (c *countingLogger) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: lineCounter{c, "restored snapshot"}, Level: hclog.Info})
}

type lineCounter struct {
	c    *countingLogger
	line string
}

func (w lineCounter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.line) {
		w.c.n.Add(1)
	}
	return len(p), nil
}
