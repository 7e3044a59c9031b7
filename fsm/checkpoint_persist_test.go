package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// checkpointIndex reads the applied index the checkpoint file of f records.
func checkpointIndex(tb testing.TB, f *FSM) uint64 {
	tb.Helper()
	c, err := readCheckpoint(filepath.Join(f.cfg.Dir, dataDir))
	if err != nil {
		tb.Fatal(err)
	}
	return c.st.applied
}

// persist persists snap into a sink of its own.
func persist(tb testing.TB, snap raft.FSMSnapshot) {
	tb.Helper()
	defer snap.Release()
	var sink unitSink
	if err := snap.Persist(&sink); err != nil || !sink.closed {
		tb.Fatalf("Persist: %v (sink closed %v)", err, sink.closed)
	}
}

// A snapshot's checkpoint is written by Persist, not by Snapshot: the
// apply goroutine does not wait for its fsyncs. What it records is the
// state when Snapshot ran, although applies went on before Persist; a
// replica reopened from it replays the rest.
func TestSnapshotCheckpointIsWrittenByPersist(t *testing.T) {
	f := unitFSM(t)
	for i := range 5 {
		appendAt(t, f, uint64(i+1), unitNow, unitMsg(fmt.Sprint("m", i), "s", 10))
	}
	before := checkpointIndex(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := checkpointIndex(t, f); got != before {
		t.Fatalf("Snapshot wrote the checkpoint (index %d, was %d)", got, before)
	}
	state := stateBytes(f)
	appendAt(t, f, 6, unitNow, unitMsg("after", "s", 10)) // applies go on meanwhile
	persist(t, snap)
	if got := checkpointIndex(t, f); got != 5 {
		t.Fatalf("after Persist the checkpoint records index %d, want 5", got)
	}
	cfg := f.cfg
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	if g.Applied() != 5 || !bytes.Equal(stateBytes(g), state) {
		t.Fatalf("reopened at index %d with another state than the snapshot's", g.Applied())
	}
	appendAt(t, g, 6, unitNow, unitMsg("after", "s", 10)) // the replay
	if got := messagesOf(t, g, "s"); len(got) != 6 {
		t.Fatalf("after the replay: %d messages, want 6", len(got))
	}
}

// A checkpoint written meanwhile on the apply goroutine (as retention
// writes one before it removes segments) is newer than a snapshot's that
// Persist writes later: that one is dropped, never written over it.
func TestOlderSnapshotCheckpointDoesNotReplaceANewer(t *testing.T) {
	f := unitFSM(t)
	appendAt(t, f, 1, unitNow, unitMsg("a", "s", 10))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	appendAt(t, f, 2, unitNow, unitMsg("b", "s", 10))
	if _, _, err := f.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
	persist(t, snap)
	if got := checkpointIndex(t, f); got != 2 {
		t.Fatalf("the checkpoint records index %d after an older snapshot persisted, want 2", got)
	}
}

// A Restore between a snapshot and its Persist: the snapshot's checkpoint
// belongs to the data the restore replaced, and is not written into the
// restored data; the Persist fails (ErrSnapshotSuperseded) and cancels its
// sink, so that Raft does not record the snapshot's older index as its
// last.
func TestSnapshotCheckpointAfterARestoreIsDropped(t *testing.T) {
	leader := unitFSM(t)
	for i := range 10 {
		appendAt(t, leader, uint64(i+1), unitNow, unitMsg(fmt.Sprint("l", i), "s", 10))
	}
	stream := snapshotStream(t, leader)

	f := unitFSM(t)
	appendAt(t, f, 1, unitNow, unitMsg("f", "other", 10))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	var sink unitSink
	err = snap.Persist(&sink)
	snap.Release()
	if !errors.Is(err, ErrSnapshotSuperseded) || sink.closed || !sink.canceled {
		t.Fatalf("Persist of a snapshot older than a restore: %v (sink closed %v, canceled %v), want ErrSnapshotSuperseded and a canceled sink",
			err, sink.closed, sink.canceled)
	}
	if f.Stopped() != nil {
		t.Fatalf("a superseded snapshot stopped the replica: %v", f.Stopped())
	}
	if got := checkpointIndex(t, f); got != 10 {
		t.Fatalf("the checkpoint records index %d after a restore to 10", got)
	}
	cfg := f.cfg
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	if got := messagesOf(t, g, "s"); len(got) != 10 || g.Applied() != 10 {
		t.Fatalf("reopened after the restore: index %d, %d messages", g.Applied(), len(got))
	}
}
