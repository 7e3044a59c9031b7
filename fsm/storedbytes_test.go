package fsm

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/logs"
)

// storedBytesCounted counts each subject's stored bytes from its consume
// log, entry by entry, the way StoredBySubject must agree with.
func storedBytesCounted(tb testing.TB, f *FSM) map[string]int64 {
	tb.Helper()
	out := map[string]int64{}
	for _, subject := range f.store.subjects() {
		cl := f.store.consumeLog(subject)
		var n int64
		for seq := cl.StartSeq(); seq < cl.EndSeq(); seq++ {
			e, err := cl.Get(seq)
			if err != nil {
				tb.Fatalf("%s/%d: %v", subject, seq, err)
			}
			n += int64(e.Size)
		}
		out[subject] = n
	}
	return out
}

// storedBytes is what StoredBySubject reports, by subject, after checking
// it against the consume logs.
func storedBytes(tb testing.TB, f *FSM) map[string]int64 {
	tb.Helper()
	got := map[string]int64{}
	for _, s := range f.StoredBySubject() {
		got[s.Subject] = s.Bytes
	}
	if want := storedBytesCounted(tb, f); !maps.Equal(got, want) {
		tb.Fatalf("stored bytes by subject %v, the consume logs point at %v", got, want)
	}
	return got
}

// storedBytesWorkload appends n messages in entries of 100, three in four
// to subject a, of sizes that vary, so that retention (3 MiB) removes
// whole consume-log segments of a.
func storedBytesWorkload(n int) []*raft.Log {
	out := []*raft.Log{unitEntry(1, &SetVersion{Now: rigStart, Version: version.V2})} // the bytes are recorded from version 2
	for i := 0; i < n; i += 100 {
		var msgs []*message.Message
		for j := i; j < i+100 && j < n; j++ {
			subject := []string{"a", "a", "a", "b"}[j%4]
			msgs = append(msgs, unitMsg(fmt.Sprint("m", j), subject, 500+(j*37)%1000))
		}
		out = append(out, unitEntry(uint64(len(out)+1), &Append{Now: rigStart + int64(len(out))*1000, Messages: msgs}))
	}
	return out
}

func storedBytesConfig(c *Config) { c.Retention = logs.Retention{MaxBytes: 3 << 20} }

// The bytes stored per subject are the bytes the consume-log entries kept
// point at, through appends and retention; identical on two replicas; kept
// by a checkpoint and a restart's replay, and by a snapshot's restore; and
// counted once from the consume logs when the checkpoint is of an earlier
// version (6 or before), which did not record them.
func TestStoredBytesPerSubject(t *testing.T) {
	entries := storedBytesWorkload(8000)
	ref := unitFSM(t, storedBytesConfig)
	for i, e := range entries {
		applyAll(ref, []*raft.Log{e})
		if i%10 == 9 {
			storedBytes(t, ref)
		}
	}
	want := storedBytes(t, ref)
	if a := ref.store.consumeLog("a"); a.StartSeq() == 0 || want["a"] == 0 || want["b"] == 0 {
		t.Fatalf("retention removed no consume-log segment of a (start %d) or a subject stores nothing: %v", a.StartSeq(), want)
	}

	// A second replica, checkpointed half way (retention writes
	// checkpoints of its own too), restarted at its last checkpoint and
	// replayed.
	cfg := unitConfig(t.TempDir())
	storedBytesConfig(&cfg)
	f := unitOpen(t, cfg)
	byIndex := map[uint64]map[string]int64{}
	for i, e := range entries[:60] {
		applyAll(f, []*raft.Log{e})
		if i == 39 {
			takeSnapshot(t, f)
		}
		byIndex[f.Applied()] = storedBytes(t, f)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	if got := storedBytes(t, g); g.Applied() < 40 || g.Applied() >= 60 || !maps.Equal(got, byIndex[g.Applied()]) {
		t.Fatalf("reopened at %d storing %v, want what it stored then, %v, from a checkpoint at 40..59", g.Applied(), got, byIndex[g.Applied()])
	}
	applyAll(g, entries[40:])
	if got := storedBytes(t, g); !maps.Equal(got, want) {
		t.Fatalf("the replayed replica stores %v, the reference %v", got, want)
	}
	if !bytes.Equal(stateBytes(g), stateBytes(ref)) {
		t.Fatal("the replicas' states differ")
	}

	// A checkpoint of an earlier version records no bytes: Open counts them.
	takeSnapshot(t, g)
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(cfg.Dir, dataDir)
	cp, err := readCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(data, checkpointFile)); b[0] != checkpointVersion || checkpointVersion != 8 {
		t.Fatalf("the checkpoint is of version %d, want %d", b[0], checkpointVersion)
	}
	cp.ends.consumeBytes, cp.st.version = nil, 0 // as the previous release wrote it: in the earliest version of the rest
	old := cp.encode()
	if old[0] >= 7 {
		t.Fatalf("the checkpoint without bytes is of version %d", old[0])
	}
	if err := writeFileAtomic(data, checkpointFile, old); err != nil {
		t.Fatal(err)
	}
	h := unitOpen(t, cfg)
	if got := storedBytes(t, h); !maps.Equal(got, want) {
		t.Fatalf("opened from a version 6 checkpoint storing %v, want %v", got, want)
	}
	v := ref.st.version
	ref.st.version = 0 // which a checkpoint before version 8 does not hold
	wantState := stateBytes(ref)
	ref.st.version = v
	if !bytes.Equal(stateBytes(h), wantState) {
		t.Fatal("the state opened from a version 6 checkpoint differs")
	}

	// A snapshot's restore carries them.
	r := unitFSM(t, storedBytesConfig)
	if err := r.Restore(io.NopCloser(bytes.NewReader(snapshotStream(t, ref)))); err != nil {
		t.Fatal(err)
	}
	if got := storedBytes(t, r); !maps.Equal(got, want) {
		t.Fatalf("restored storing %v, want %v", got, want)
	}
}
