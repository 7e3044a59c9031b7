package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/poll"
)

// A replica whose disk lacks room for a batch and the reserve waits before
// applying it, holding no lock (status pages and reads go on), tells
// OnDiskWait, and applies it once space is back. Before, it applied
// regardless and a full disk failed the write halfway, on every replica.
func TestApplyWaitsForDiskSpace(t *testing.T) {
	disk := &fakeDisk{free: 1 << 40}
	var waits []bool // appended on the apply goroutine, read after it answered
	f := unitFSM(t, func(c *Config) {
		c.DiskFree = disk.probe
		c.OnDiskWait = func(w bool) { waits = append(waits, w) }
	})
	appendN(t, f, 1, "s", "m", 3)
	disk.mu.Lock()
	disk.free = f.cfg.DiskReserve // short of the entry's bytes
	disk.mu.Unlock()
	done := make(chan any)
	go func() {
		done <- f.Apply(unitEntry(2, &Append{Now: 5000, Messages: []*message.Message{unitMsg("late", "s", 100)}}))
	}()
	waitUntil(t, "the replica waits for disk space", f.WaitingForDisk)
	// Readers do not wait with it.
	if f.Backlog() != 0 || len(f.Delays().Hours) != 0 || f.Applied() != 1 {
		t.Fatalf("while waiting: backlog %d, applied %d", f.Backlog(), f.Applied())
	}
	if _, err := f.Message("s", 0); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("applied with the disk full: %v", describe(r))
	default:
	}
	disk.mu.Lock()
	disk.free = 1 << 40
	disk.mu.Unlock()
	if r := resultAs[*AppendResult](t, <-done); r.Messages[0].Status != Appended {
		t.Fatalf("once space is back: %+v", r.Messages[0])
	}
	if f.WaitingForDisk() || f.Applied() != 2 {
		t.Fatalf("after the wait: waiting %v, applied %d", f.WaitingForDisk(), f.Applied())
	}
	if len(waits) != 2 || !waits[0] || waits[1] {
		t.Fatalf("OnDiskWait heard %v, want [true false]", waits)
	}
}

// Interrupting a replica that waits for space (its node is closing)
// applies nothing of that batch or any later one; reopened with space, it
// applies them.
func TestInterruptWhileWaitingForSpace(t *testing.T) {
	disk := &fakeDisk{free: 0}
	f := unitFSM(t, func(c *Config) { c.DiskFree = disk.probe })
	done := make(chan any)
	go func() {
		done <- f.Apply(unitEntry(1, &Append{Now: 5000, Messages: []*message.Message{unitMsg("a", "s", 10)}}))
	}()
	waitUntil(t, "the replica waits for disk space", f.WaitingForDisk)
	f.Interrupt()
	for _, r := range []any{<-done, f.Apply(unitEntry(2, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}))} {
		if err, ok := r.(error); !ok || !errors.Is(err, ErrStopped) {
			t.Fatalf("answer %v, want ErrStopped", r)
		}
	}
	if f.Applied() != 0 {
		t.Fatalf("applied %d while stopped", f.Applied())
	}
	cfg := f.cfg
	cfg.DiskFree = (&fakeDisk{free: 1 << 40}).probe
	f.Close()
	g := unitOpen(t, cfg)
	if r := appendAt(t, g, 1, 5000, unitMsg("a", "s", 10)); r.Messages[0].Status != Appended {
		t.Fatalf("reopened: %+v", r.Messages[0])
	}
}

// waitUntil polls cond until it holds, for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 10*time.Second, what, cond)
}

// A write that fails although the space check passed (the disk filled
// meanwhile, or failed) stops the replica cleanly: OnFatal hears it, no
// panic; every later entry is answered ErrStopped and changes nothing.
// Reopened once writes work again, the replica returns to its last
// checkpoint and, replaying the same entries, ends byte-identical to a
// replica that never failed. The write failure is real: the child process
// runs under a file-size limit (RLIMIT_FSIZE), so the kernel refuses the
// write that crosses it (EFBIG).
func TestFailedWriteStopsTheReplica(t *testing.T) {
	if os.Getenv("QMQ_FSM_CHILD") == t.Name() {
		failedWriteChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	cmd.Env = append(os.Environ(), "QMQ_FSM_CHILD="+t.Name(), "QMQ_FSM_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
}

func failedWriteChild(t *testing.T) {
	dir := os.Getenv("QMQ_FSM_DIR")
	var fatal []error
	cfg := unitConfig(dir)
	cfg.OnFatal = func(err error) { fatal = append(fatal, err) }
	f := unitOpen(t, cfg)
	entries := func(from, to int) []*raft.Log {
		var out []*raft.Log
		for i := from; i < to; i++ {
			m := unitMsg(fmt.Sprint("m", i), "s", 20<<10)
			out = append(out, unitEntry(uint64(i), &Append{Now: int64(1000 + i), Messages: []*message.Message{m}}))
		}
		return out
	}
	applyAll(f, entries(1, 5))
	takeSnapshot(t, f) // the checkpoint a restart returns to

	// Files may grow 64 KiB past the message-log segment's present size; a
	// write past that fails with EFBIG (the signal would kill the process).
	signal.Ignore(syscall.SIGXFSZ)
	seg := f.store.messages.Log().Segments()
	limit := uint64(seg[len(seg)-1].FileSize + 64<<10)
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: limit, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	var stoppedAt uint64
	for _, e := range entries(5, 20) {
		r := f.Apply(e)
		if err, ok := r.(error); ok && errors.Is(err, ErrStopped) {
			stoppedAt = e.Index
			break
		}
	}
	if stoppedAt == 0 || len(fatal) != 1 || !errors.Is(fatal[0], syscall.EFBIG) {
		t.Fatalf("stopped at %d; OnFatal heard %v, want one EFBIG", stoppedAt, fatal)
	}
	if r := f.Apply(unitEntry(stoppedAt+1, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1})); !errors.Is(r.(error), ErrStopped) {
		t.Fatalf("after the failure: %v, want ErrStopped", r)
	}
	t.Logf("the write of entry %d failed: %v", stoppedAt, fatal[0])

	// Writes work again: reopened, the replica replays from its checkpoint.
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	f.Close()
	g := unitOpen(t, cfg)
	if g.Applied() != 4 {
		t.Fatalf("reopened at %d, want the checkpoint's 4", g.Applied())
	}
	applyAll(g, entries(5, 20))
	ref := unitFSM(t)
	applyAll(ref, entries(1, 20))
	wantSameFiles(t, g.cfg.Dir, ref.cfg.Dir)
	if len(fatal) != 1 {
		t.Fatalf("OnFatal heard %v after the restart", fatal)
	}
}

// A batch applies as far as the disk has room, entry by entry: a replayed
// batch of many entries (a restart hands Raft's whole backlog over at
// once) needs room for one entry at a time, not for all of them together.
// Before, a replica summed the batch, found more than its disk held, and
// waited for ever (the chaos run caught one replaying many Fires).
func TestBatchAppliesAsFarAsThereIsRoom(t *testing.T) {
	disk := &fakeDisk{free: 1 << 40}
	f := unitFSM(t, func(c *Config) { c.DiskFree = disk.probe })
	var batch []*raft.Log
	for i := 1; i <= 40; i++ {
		var cmd encoder = &Append{Now: int64(1000 + i), Messages: []*message.Message{unitMsg(fmt.Sprint("m", i), "s", 1000)}}
		if i%2 == 0 {
			cmd = &Fire{Now: int64(1000 + i), Refs: []uint64{1, 2, 3}}
		}
		batch = append(batch, unitEntry(uint64(i), cmd))
	}
	disk.mu.Lock()
	disk.free = f.cfg.DiskReserve + 3*f.entryWrites(batch[1]) // room for a few entries, never the batch
	disk.mu.Unlock()
	done := make(chan []any)
	go func() { done <- f.ApplyBatch(batch) }()
	select {
	case out := <-done:
		for i, r := range out {
			if err, ok := r.(error); ok {
				t.Fatalf("entry %d: %v", i+1, err)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a batch larger than the free space, each entry of which fits, was never applied")
	}
	if f.Applied() != 40 || f.WaitingForDisk() {
		t.Fatalf("applied %d, waiting %v", f.Applied(), f.WaitingForDisk())
	}
}

// A replica that stopped on a failed write takes no snapshot and writes no
// checkpoint: the failed entry may be half applied (a message-log record
// without its consume entry, when opening a new subject's consume log
// failed), and a checkpoint would make that durable, so that the replay
// after a restart took the message for a duplicate of itself and the
// replica differed from the others for good.
func TestStoppedReplicaTakesNoSnapshot(t *testing.T) {
	f := unitFSM(t, func(c *Config) { c.OnFatal = func(error) {} })
	appendN(t, f, 1, "s", "m", 2)
	takeSnapshot(t, f)
	before, err := os.ReadFile(filepath.Join(f.cfg.Dir, dataDir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	f.stopApplying(errors.New("a write failed"), true)
	if _, err := f.Snapshot(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Snapshot after a stop: %v, want ErrStopped", err)
	}
	after, err := os.ReadFile(filepath.Join(f.cfg.Dir, dataDir, checkpointFile))
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("the checkpoint changed after the stop (%v)", err)
	}
}

// The room a replica keeps before applying counts a checkpoint, which
// retention writes in the middle of applying an append: without it, a
// large state's checkpoint could fail the write on every replica at the
// same entry, and again after every restart.
func TestSpaceForACheckpoint(t *testing.T) {
	disk := &fakeDisk{free: 1 << 40}
	f := unitFSM(t, func(c *Config) { c.DiskFree = disk.probe })
	appendN(t, f, 1, "s", "m", 1)
	takeSnapshot(t, f)
	if f.checkpointSize == 0 {
		t.Fatal("the checkpoint's size is not known")
	}
	f.checkpointSize = 100 << 20 // a large state
	e := unitEntry(2, &Append{Now: 5000, Messages: []*message.Message{unitMsg("late", "s", 10)}})
	disk.mu.Lock()
	disk.free = f.cfg.DiskReserve + f.entryWrites(e) + 100<<20 // room for the entry and one checkpoint, not two
	disk.mu.Unlock()
	done := make(chan any)
	go func() { done <- f.Apply(e) }()
	waitUntil(t, "the replica waits for room for a checkpoint", f.WaitingForDisk)
	disk.mu.Lock()
	disk.free += 100 << 20
	disk.mu.Unlock()
	if r := resultAs[*AppendResult](t, <-done); r.Messages[0].Status != Appended {
		t.Fatalf("once there is room: %+v", r.Messages[0])
	}
}
