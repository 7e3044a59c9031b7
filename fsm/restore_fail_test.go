package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/qmqgo/qmq/logs"
)

// A snapshot that streams intact but cannot be opened (its checkpoint
// claims more data than it carries) is refused, and the FSM keeps serving
// its previous state.
func TestRestoreRefusesSnapshotThatDoesNotOpen(t *testing.T) {
	src := unitFSM(t)
	applyAt(src, 1, &Append{Now: 1, Messages: []*logs.Message{unitMsg("a", "s", 10)}})
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	fs := snap.(*fsmSnapshot)
	cp, err := decodeCheckpoint(fs.manifest.checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	cp.ends.messages += 1000 // past the end of the segment it ships
	bad := &manifest{checkpoint: cp.encode(), files: fs.manifest.files}
	var stream bytes.Buffer
	if err := writeStream(&stream, bad, fs.open); err != nil {
		t.Fatal(err)
	}

	dst := unitFSM(t)
	applyAt(dst, 1, &Append{Now: 1, Messages: []*logs.Message{unitMsg("own", "t", 10)}})
	if err := dst.Restore(io.NopCloser(&stream)); err == nil {
		t.Fatal("a snapshot whose logs do not open was restored")
	}
	if m, err := dst.Message("t", 0); err != nil || m.ID != "own" {
		t.Fatalf("after the refused restore: %v, %v", m, err)
	}
	r := resultAs[*AppendResult](t, applyAt(dst, 2, &Append{Now: 2, Messages: []*logs.Message{unitMsg("next", "t", 10)}}))
	if r.Messages[0].Status != Appended || dst.Applied() != 2 {
		t.Fatalf("apply after the refused restore: %+v, applied %d", r.Messages[0], dst.Applied())
	}
}
