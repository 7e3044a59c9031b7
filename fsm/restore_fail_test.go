package fsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/message"
)

// A snapshot that streams intact but cannot be opened (its checkpoint
// claims more data than it carries) is refused, and the FSM keeps serving
// its previous state.
func TestRestoreRefusesSnapshotThatDoesNotOpen(t *testing.T) {
	src := unitFSM(t)
	applyAt(src, 1, &Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 10)}})
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	fs := snap.(*fsmSnapshot)
	cp, err := decodeCheckpoint(fs.manifest.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	cp.ends.messages += 1000 // past the end of the segment it ships
	bad := &snapshot.Manifest{Checkpoint: cp.encode(), Files: fs.manifest.Files}
	var stream bytes.Buffer
	if err := snapshot.Write(&stream, bad, fs.open); err != nil {
		t.Fatal(err)
	}

	dst := unitFSM(t)
	applyAt(dst, 1, &Append{Now: 1, Messages: []*message.Message{unitMsg("own", "t", 10)}})
	if err := dst.Restore(io.NopCloser(&stream)); err == nil {
		t.Fatal("a snapshot whose logs do not open was restored")
	}
	if m, err := dst.Message("t", 0); err != nil || m.ID != "own" {
		t.Fatalf("after the refused restore: %v, %v", m, err)
	}
	r := resultAs[*AppendResult](t, applyAt(dst, 2, &Append{Now: 2, Messages: []*message.Message{unitMsg("next", "t", 10)}}))
	if r.Messages[0].Status != Appended || dst.Applied() != 2 {
		t.Fatalf("apply after the refused restore: %+v, applied %d", r.Messages[0], dst.Applied())
	}
}

// A restore whose directory swap fails must not go back to the FSM's last
// checkpoint: Raft keeps its applied index either way, so the entries
// applied since that checkpoint would never be applied again. The replica
// stops instead, and Open completes the swap.
func TestRestoreWhoseSwapFailsStopsAndOpenCompletesIt(t *testing.T) {
	for _, failing := range []string{dataDir, oldDir} { // the rename to data.old, or the one to data
		t.Run("rename to "+failing, func(t *testing.T) {
			src := unitFSM(t)
			for i := uint64(1); i <= 10; i++ {
				appendAt(t, src, i, 1000, unitMsg(fmt.Sprint("src", i), "s", 10))
			}
			stream := snapshotStream(t, src)

			var fatal atomic.Pointer[error]
			cfg := unitConfig(t.TempDir())
			cfg.OnFatal = func(err error) { fatal.Store(&err) }
			dst := unitOpen(t, cfg)
			appendAt(t, dst, 1, 1000, unitMsg("own1", "t", 10))
			snapshotStream(t, dst) // checkpoint at 1
			appendAt(t, dst, 2, 1000, unitMsg("own2", "t", 10))
			appendAt(t, dst, 3, 1000, unitMsg("own3", "t", 10))
			dst.rename = func(from, to string) error {
				if filepath.Base(to) == failing && filepath.Base(from) != oldDir {
					return fmt.Errorf("rename %s: %w", to, syscall.EIO)
				}
				return os.Rename(from, to)
			}
			if err := dst.Restore(io.NopCloser(bytes.NewReader(stream))); err == nil {
				t.Fatal("a restore whose swap failed succeeded")
			}
			if got := dst.Applied(); got < 3 {
				t.Fatalf("after the failed swap the FSM is back at applied index %d; Raft believes 3 applied", got)
			}
			if dst.Stopped() == nil || fatal.Load() == nil {
				t.Fatal("a restore whose swap failed did not stop the replica")
			}
			dst.Close()
			again := unitOpen(t, cfg)
			if got := again.Applied(); got != 10 {
				t.Fatalf("reopened at applied index %d, want the snapshot's 10", got)
			}
			if m, err := again.Message("s", 9); err != nil || m.ID != "src10" {
				t.Fatalf("Message(s, 9) after reopening: %v, %v", m, err)
			}
			for _, leftover := range []string{restoreDir, oldDir} {
				if _, err := os.Stat(filepath.Join(cfg.Dir, leftover)); !os.IsNotExist(err) {
					t.Errorf("%s left after reopening: %v", leftover, err)
				}
			}
		})
	}
}

// A data directory moved aside (data.old) with no complete restore to put
// in its place is put back, never left for an empty state machine.
func TestOpenPutsBackDataMovedAside(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, 1000, unitMsg("a", "s", 10))
	snapshotStream(t, f)
	f.Close()
	if err := os.Rename(filepath.Join(cfg.Dir, dataDir), filepath.Join(cfg.Dir, oldDir)); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	if g.Applied() != 1 {
		t.Fatalf("opened at applied index %d with the data moved aside, want 1", g.Applied())
	}
}
