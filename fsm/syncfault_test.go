package fsm

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// A write-back lost since the last checkpoint is reported only to the next
// sync (with eviction fsyncs deferred, a closed file's is reported to
// nobody else). The snapshot that meets it must stop the replica, not pass
// as a failed snapshot: a replica that went on would record the lost bytes
// as durable at its next checkpoint.
func TestLostWriteBackStopsTheReplica(t *testing.T) {
	var fail atomic.Bool
	var fatal atomic.Pointer[error]
	cfg := unitConfig(t.TempDir())
	cfg.SyncFault = func() error {
		if fail.Load() {
			return syscall.EIO
		}
		return nil
	}
	cfg.OnFatal = func(err error) { fatal.Store(&err) }
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, 1000, unitMsg("a", "s", 10))
	snapshotStream(t, f) // a checkpoint at 1
	appendAt(t, f, 2, 1000, unitMsg("b", "s", 10))

	fail.Store(true) // the write-back of b is lost
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	sink := &unitSink{}
	if err := snap.Persist(sink); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Persist = %v, want EIO", err)
	}
	if fatal.Load() == nil || !errors.Is(*fatal.Load(), syscall.EIO) {
		t.Fatal("a failed sync of a checkpoint did not call OnFatal")
	}
	if err := f.Stopped(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Stopped = %v after a failed sync of a checkpoint, want EIO", err)
	}
	fail.Store(false) // the next sync would succeed: the error was reported once
	if r := applyAt(f, 3, &Append{Now: 1000, Messages: []*message.Message{unitMsg("c", "s", 10)}}); !errors.Is(asError(r), ErrStopped) && !errors.Is(asError(r), syscall.EIO) {
		t.Fatalf("apply after a lost write-back: %v, want the replica stopped", describe(r))
	}
	if _, err := f.Snapshot(); err == nil {
		t.Fatal("a stopped replica took a checkpoint")
	}
	if got := mustCheckpointIndex(t, cfg.Dir); got != 1 {
		t.Fatalf("the checkpoint records index %d, want the last good one, 1", got)
	}
}

// Retention's checkpoint, written at once on the apply goroutine, stops
// the replica too when its sync fails.
func TestLostWriteBackStopsRetention(t *testing.T) {
	var fail atomic.Bool
	var fatal atomic.Pointer[error]
	cfg := unitConfig(t.TempDir())
	cfg.Retention = logs.Retention{MaxBytes: 3 << 20}
	cfg.SyncFault = func() error {
		if fail.Load() {
			return syscall.EIO
		}
		return nil
	}
	cfg.OnFatal = func(err error) { fatal.Store(&err) }
	f := unitOpen(t, cfg)
	fail.Store(true)
	applyAll(f, retentionWorkload(120))
	if fatal.Load() == nil || f.Stopped() == nil {
		t.Fatal("retention's failed checkpoint sync did not stop the replica")
	}
	if f.store.messages.Log().Start() != 0 {
		t.Fatal("retention removed segments after its checkpoint failed")
	}
}

func asError(r any) error {
	err, _ := r.(error)
	return err
}

// mustCheckpointIndex reads the applied index of the checkpoint in dir
// (an FSM's Dir).
func mustCheckpointIndex(tb testing.TB, dir string) uint64 {
	tb.Helper()
	c, err := readCheckpoint(dir + "/" + dataDir)
	if err != nil {
		tb.Fatal(err)
	}
	return c.st.applied
}

// Persist and retention both sync through one descriptor of the FSM's
// directory (syncfs), and a write-back error is reported to one syncfs
// only: of two syncs racing, one sees it and the other passes. Retention's
// must then not write its checkpoint, which would record the lost bytes as
// durable: the syncs are serialised, and the one that saw the error stops
// the replica before the other runs. Here Persist's sync is the one that
// reports the error, and retention's comes while it is still running.
func TestRacingSyncsStopBeforeEitherCheckpoints(t *testing.T) {
	var persistCall atomic.Bool
	inside, release := make(chan struct{}), make(chan struct{})
	cfg := unitConfig(t.TempDir())
	cfg.Retention = logs.Retention{MaxBytes: 3 << 20}
	var fatal atomic.Int32
	cfg.OnFatal = func(error) { fatal.Add(1) }
	cfg.SyncFault = func() error {
		if persistCall.CompareAndSwap(true, false) {
			close(inside)
			<-release
			return syscall.EIO // this sync saw the lost write-back; the others see none
		}
		return nil
	}
	f := unitOpen(t, cfg)
	waits := make(chan struct{})
	f.syncWaits = func() { close(waits) }
	entries := retentionWorkload(120)
	applyAll(f, entries[:20])
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	before := mustCheckpointIndex(t, cfg.Dir)
	persistCall.Store(true)
	persisted := make(chan error)
	go func() { persisted <- snap.Persist(&unitSink{}) }()
	<-inside
	applied := make(chan struct{})
	go func() { applyAll(f, entries[20:]); close(applied) }() // retention checkpoints and removes
	select {
	case <-waits: // retention's sync waits for Persist's
	case <-applied: // retention's sync ran beside Persist's
	}
	close(release)
	if err := <-persisted; !errors.Is(err, syscall.EIO) {
		t.Fatalf("Persist = %v, want EIO", err)
	}
	<-applied
	if after := mustCheckpointIndex(t, cfg.Dir); after != before || f.store.messages.Log().Start() != 0 {
		t.Fatalf("retention wrote a checkpoint (index %d, was %d) and removed segments (start %d) beside a sync that reported a lost write-back",
			after, before, f.store.messages.Log().Start())
	}
	if f.Stopped() == nil || fatal.Load() != 1 {
		t.Fatalf("stopped: %v, OnFatal told %d times", f.Stopped(), fatal.Load())
	}
}
