package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// openDescriptors returns how many descriptors the process holds (the
// listing's own included).
func openDescriptors(tb testing.TB) int {
	tb.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatalf("listing descriptors: %v", err)
	}
	return len(entries)
}

func TestConfigMaxOpenFiles(t *testing.T) {
	if got := DefaultConfig("x").MaxOpenFiles; got != 1024 {
		t.Fatalf("default MaxOpenFiles %d, want 1024", got)
	}
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, false}, {15, false}, {16, true}, {17, true}} {
		cfg := unitConfig(t.TempDir())
		cfg.MaxOpenFiles = tc.n
		err := cfg.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "MaxOpenFiles")) {
			t.Fatalf("MaxOpenFiles %d: Validate = %v, want ok=%v", tc.n, err, tc.ok)
		}
	}
}

// subjectsWorkload applies, from index+1 on, Appends of one message of
// bodySize bytes to each of n subjects, ten subjects a command, and
// records each message's id in want by subject. It returns the last index.
func subjectsWorkload(tb testing.TB, f *FSM, index uint64, now int64, n, bodySize int, round string, want map[string][]string) uint64 {
	tb.Helper()
	for i := 0; i < n; i += 10 {
		var msgs []*message.Message
		for j := i; j < min(i+10, n); j++ {
			subject := fmt.Sprintf("subject.%03d", j)
			id := subject + "-" + round
			msgs = append(msgs, unitMsg(id, subject, bodySize))
			want[subject] = append(want[subject], id)
		}
		index++
		for k, m := range appendAt(tb, f, index, now, msgs...).Messages {
			if m.Status != Appended {
				tb.Fatalf("append of %s: status %d, %v", msgs[k].ID, m.Status, m.Err)
			}
		}
	}
	return index
}

// wantMessages reads every subject's messages back and compares their ids
// with want.
func wantMessages(tb testing.TB, f *FSM, want map[string][]string) {
	tb.Helper()
	for subject, ids := range want {
		for seq, id := range ids {
			m, err := f.Message(subject, int64(seq))
			if err != nil || m.ID != id {
				tb.Fatalf("Message(%s, %d) = %v, %v; want %s", subject, seq, m, err, id)
			}
		}
	}
}

const lowFileLimitEnv = "QMQ_FSM_LOW_FILE_LIMIT_DIR"

// TestManySubjectsUnderLowFileLimit runs, in a child process whose file
// limit is 64, an FSM with MaxOpenFiles 32 through 500 subjects, delayed
// messages in 40 hours, a snapshot, a restart, fires, more appends and a
// read of every message.
func TestManySubjectsUnderLowFileLimit(t *testing.T) {
	if dir := os.Getenv(lowFileLimitEnv); dir != "" {
		manySubjectsUnderLowFileLimit(t, dir)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestManySubjectsUnderLowFileLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), lowFileLimitEnv+"="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestManySubjectsUnderLowFileLimit")) {
		t.Fatalf("the child with RLIMIT_NOFILE 64 failed: %v\n%s", err, out)
	}
}

func manySubjectsUnderLowFileLimit(t *testing.T, dir string) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 64, Max: lim.Max}); err != nil {
		t.Fatal(err)
	}
	cfg := unitConfig(dir)
	cfg.MaxOpenFiles = 32
	f := unitOpen(t, cfg)
	want := map[string][]string{}
	// 500 subjects × 2 KiB: the 1 MiB message log rolls once per round.
	index := subjectsWorkload(t, f, 0, unitNow, 500, 2048, "a", want)
	var refs []uint64
	var delayedIDs []string
	for k := range 40 { // one hour each: more hours than the schedule keeps open
		index++
		id := fmt.Sprintf("delayed-%d", k)
		m := delayedMsg(id, fmt.Sprintf("subject.%03d", k), unitNow+int64(k+1)*delaywheel.HourMillis)
		r := appendAt(t, f, index, unitNow, m).Messages[0]
		if r.Status != Scheduled {
			t.Fatalf("delayed append: status %d, %v", r.Status, r.Err)
		}
		refs = append(refs, r.Ref)
		delayedIDs = append(delayedIDs, id)
	}
	index++
	if got := pullAt(t, f, index, unitNow, "subject.007", "g", "c", 10); len(got.Entries) != 1 {
		t.Fatalf("pull: %v", got.Entries)
	}
	index = subjectsWorkload(t, f, index, unitNow+1, 500, 2048, "b", want)
	snapshotStream(t, f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	f = unitOpen(t, cfg)
	if f.Applied() != index {
		t.Fatalf("reopened at index %d, want %d", f.Applied(), index)
	}
	wantMessages(t, f, want)
	later := unitNow + 41*delaywheel.HourMillis
	index++
	if r := fireAt(t, f, index, later, refs...); r.Fired != len(refs) {
		t.Fatalf("fired %d of %d", r.Fired, len(refs))
	}
	for k, id := range delayedIDs {
		subject := fmt.Sprintf("subject.%03d", k)
		want[subject] = append(want[subject], id)
	}
	subjectsWorkload(t, f, index, later, 500, 2048, "c", want)
	wantMessages(t, f, want)
	snapshotStream(t, f)
}

// On Linux a checkpoint's syncfs makes the files the cache closed durable
// and reports their write-back errors, so evicting a dirty file costs no
// fsync on the apply goroutine (one per append with more subjects written
// in turn than the cache holds).
func TestEvictionDefersSyncsToCheckpoint(t *testing.T) {
	f := unitOpen(t, unitConfig(t.TempDir()))
	if !f.store.files.DefersEvictionSyncs() {
		t.Fatal("the file cache fsyncs the dirty files it evicts")
	}
}

// TestOpenFilesBounded checks that the descriptors an FSM holds stay near
// MaxOpenFiles while many subjects and segments are written, retained and
// read concurrently.
func TestOpenFilesBounded(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	cfg.MaxOpenFiles = 16
	cfg.Retention.MaxBytes = 2 << 20 // message-log segments go, consume-log ones with them
	// The cache's bound; then the schedule's directory, a directory listed
	// or fsynced, a file created before room is made for it, the
	// descriptors listing /proc, and the files in use beyond the bound: one
	// per reader, the writer's, one an eviction fsyncs.
	const readers = 2
	slack := 1 + 1 + 1 + (readers + 1) + (readers + 2)
	base := openDescriptors(t)
	f := unitOpen(t, cfg)
	var peak atomic.Int64
	sample := func() {
		if n := int64(openDescriptors(t) - base); n > peak.Load() {
			peak.Store(n)
		}
	}
	const subjects = 300
	var rounds atomic.Int64 // rounds fully applied
	var stop atomic.Bool
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for !stop.Load() {
				subject := fmt.Sprintf("subject.%03d", rng.IntN(subjects))
				seq := rng.Int64N(rounds.Load() + 1)
				_, err := f.Message(subject, seq)
				if err != nil && !errors.Is(err, logs.ErrRetained) && !errors.Is(err, logs.ErrBeyondEnd) {
					t.Errorf("Message(%s, %d): %v", subject, seq, err)
					return
				}
				sample()
			}
		})
	}
	want := map[string][]string{}
	var index uint64
	for round := range 8 {
		index = subjectsWorkload(t, f, index, unitNow+int64(round), subjects, 2048, fmt.Sprint(round), want)
		rounds.Add(1)
		sample()
		if round%3 == 1 {
			snapshotStream(t, f) // every log synced: each file reopened
			sample()
		}
	}
	stop.Store(true)
	wg.Wait()
	if f.store.messages.Log().Start() == 0 {
		t.Fatal("retention removed nothing")
	}
	if got := peak.Load(); got > int64(cfg.MaxOpenFiles+slack) {
		t.Fatalf("%d descriptors open at the peak, want at most %d (MaxOpenFiles %d + %d)", got, cfg.MaxOpenFiles+slack, cfg.MaxOpenFiles, slack)
	}
	if got := f.store.files.Open(); got > cfg.MaxOpenFiles {
		t.Fatalf("%d segment files open when idle, want at most %d", got, cfg.MaxOpenFiles)
	}
	t.Logf("peak %d descriptors above the %d before Open", peak.Load(), base)
}
