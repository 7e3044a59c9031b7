package fsm

import (
	"bytes"
	"fmt"
	"github.com/qmqgo/qmq/logs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
)

// waitIndexed waits until f's message index has built every segment's sidecar.
func waitIndexed(t *testing.T, f *FSM) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f.store.index.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("message index not built")
		}
		time.Sleep(time.Millisecond)
	}
}

// wantFound asserts that FindMessage(id) returns n messages with that id,
// newest first, each at the sequence its consume log gives it.
func wantFound(t *testing.T, f *FSM, id string, n int) {
	t.Helper()
	got, err := f.FindMessage(id, 0, 0)
	if err != nil {
		t.Fatalf("FindMessage(%s): %v", id, err)
	}
	if len(got) != n {
		t.Fatalf("FindMessage(%s): %d messages, want %d", id, len(got), n)
	}
	for i, sm := range got {
		if sm.Message.ID != id || (i > 0 && sm.Offset >= got[i-1].Offset) {
			t.Fatalf("FindMessage(%s)[%d] = %s at %d", id, i, sm.Message.ID, sm.Offset)
		}
		m, err := f.Message(sm.Message.Subject, sm.Seq)
		if err != nil || m.ID != id {
			t.Fatalf("FindMessage(%s)[%d]: seq %d holds %v (%v)", id, i, sm.Seq, m, err)
		}
	}
}

// appendMany appends n messages of 4 KiB across subjects, ids msg-0..n-1,
// from Raft index index on, and returns the next index.
func appendMany(t *testing.T, f *FSM, index uint64, n int) uint64 {
	t.Helper()
	for i := 0; i < n; i += 10 {
		var msgs []*message.Message
		for j := i; j < i+10 && j < n; j++ {
			msgs = append(msgs, unitMsg(fmt.Sprintf("msg-%d", j), fmt.Sprintf("s%d", j%3), 4<<10))
		}
		appendAt(t, f, index, 1000+int64(index), msgs...)
		index++
	}
	return index
}

func TestFindMessageAcrossSegmentsAndReopen(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	next := appendMany(t, f, 1, 800) // ~3 MiB: several 1 MiB segments
	if f.store.messages.Log().SegmentCount() < 3 {
		t.Fatalf("%d segments", f.store.messages.Log().SegmentCount())
	}
	for _, id := range []string{"msg-0", "msg-399", "msg-799"} {
		wantFound(t, f, id, 1)
	}
	wantFound(t, f, "nope", 0)
	// Outside the dedup window, the same id again is a second message.
	appendAt(t, f, next, 1000+int64(next)+2*maxDedupWindow, unitMsg("msg-5", "s9", 10))
	wantFound(t, f, "msg-5", 2)
	// Bounded: by count, and by bytes (the first always comes back).
	for _, b := range []struct{ max, bytes, want int }{{1, 0, 1}, {0, 1, 1}, {2, 1 << 20, 2}, {0, 0, 2}} {
		if got, err := f.FindMessage("msg-5", b.max, b.bytes); err != nil || len(got) != b.want || got[0].Message.Subject != "s9" {
			t.Fatalf("FindMessage(msg-5, %d, %d): %d messages, %v (want %d, the newest first)", b.max, b.bytes, len(got), err, b.want)
		}
	}
	checkpointNow(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	f = unitOpen(t, cfg)
	waitIndexed(t, f)
	wantFound(t, f, "msg-0", 1)
	wantFound(t, f, "msg-5", 2)
	wantFound(t, f, "msg-799", 1)
}

// checkpointNow makes what f applied durable, for a reopen to keep.
func checkpointNow(t *testing.T, f *FSM) {
	t.Helper()
	if _, _, err := f.writeCheckpoint(); err != nil {
		t.Fatal(err)
	}
}

// Two replicas applying the same commands write byte-identical sidecars,
// and a sidecar deleted is rebuilt the same.
func TestFindMessageIndexIdenticalOnReplicas(t *testing.T) {
	cfgA, cfgB := unitConfig(t.TempDir()), unitConfig(t.TempDir())
	a, b := unitOpen(t, cfgA), unitOpen(t, cfgB)
	appendMany(t, a, 1, 800)
	appendMany(t, b, 1, 800)
	checkpointNow(t, a)
	checkpointNow(t, b)
	a.Close()
	b.Close()
	idx := filepath.Join(cfgB.Dir, dataDir, indexDir)
	entries, err := os.ReadDir(idx)
	if err != nil || len(entries) < 2 {
		t.Fatalf("index dir: %d files, %v", len(entries), err)
	}
	os.Remove(filepath.Join(idx, entries[0].Name()))
	b = unitOpen(t, cfgB)
	waitIndexed(t, b)
	b.Close()
	after, err := os.ReadDir(filepath.Join(cfgA.Dir, dataDir, indexDir))
	if err != nil || len(after) != len(entries) {
		t.Fatalf("%d sidecars, want %d (%v)", len(after), len(entries), err)
	}
	for _, e := range after {
		data, err := os.ReadFile(filepath.Join(cfgA.Dir, dataDir, indexDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		other, err := os.ReadFile(filepath.Join(idx, e.Name()))
		if err != nil || !bytes.Equal(other, data) {
			t.Fatalf("%s differs between replicas (%v)", e.Name(), err)
		}
	}
}

// Retention removes the sidecars of the segments it removes; their
// messages are no longer found, the others still are.
func TestFindMessageAfterRetention(t *testing.T) {
	f := unitFSM(t, func(c *Config) { c.Retention = logs.Retention{MaxBytes: 2 << 20} })
	appendMany(t, f, 1, 1200)
	ml := f.store.messages.Log()
	if ml.Start() == 0 {
		t.Fatal("retention removed nothing")
	}
	waitIndexed(t, f)
	wantFound(t, f, "msg-0", 0)
	wantFound(t, f, "msg-1199", 1)
	entries, err := os.ReadDir(filepath.Join(f.cfg.Dir, dataDir, indexDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() < fmt.Sprintf("%020d", ml.Start()) {
			t.Fatalf("sidecar %s of a removed segment (start %d)", e.Name(), ml.Start())
		}
	}
}

// A delayed message is found once its fire delivers it to its subject.
func TestFindMessageFired(t *testing.T) {
	f := unitFSM(t)
	due := unitNow + 5000
	res := appendAt(t, f, 1, unitNow, delayedMsg("later", "s", due))
	wantFound(t, f, "later", 0)
	if r := fireAt(t, f, 2, due+20, res.Messages[0].Ref); r.Fired != 1 {
		t.Fatalf("fire: %+v", r)
	}
	wantFound(t, f, "later", 1)
}

// FindMessage runs on other goroutines while apply appends and rolls
// segments (run with -race); every answer is confirmed.
func TestFindMessageDuringApply(t *testing.T) {
	f := unitFSM(t)
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			id := fmt.Sprintf("msg-%d", i%800)
			got, err := f.FindMessage(id, 0, 0)
			if err != nil {
				errs <- err
				return
			}
			for _, sm := range got {
				if sm.Message.ID != id {
					errs <- fmt.Errorf("FindMessage(%s) returned %s", id, sm.Message.ID)
					return
				}
			}
		}
	}()
	appendMany(t, f, 1, 800)
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	wantFound(t, f, "msg-400", 1)
}
