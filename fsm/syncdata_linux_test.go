package fsm

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
)

// Before Linux 5.8 syncfs(2) reports no write-back error, so a dirty file
// the cache closed without an fsync could lose its bytes unnoticed: on
// such a kernel the state machine fsyncs each file it evicts and each log
// at a checkpoint, and says why.
func TestOldKernelFsyncsOnEviction(t *testing.T) {
	var mu sync.Mutex
	var lines strings.Builder
	release := kernelRelease
	t.Cleanup(func() { kernelRelease = release })
	for _, tc := range []struct {
		release string
		defers  bool
	}{{"5.4.0-150-generic", false}, {"6.1.0-18-amd64", true}} {
		kernelRelease = func() (string, error) { return tc.release, nil }
		lines.Reset()
		f := unitFSM(t, func(c *Config) {
			c.Logger = hclog.New(&hclog.LoggerOptions{Output: lockedWriter{&mu, &lines}, Level: hclog.Info})
		})
		if got := f.store.files.DefersEvictionSyncs(); got != tc.defers {
			t.Errorf("kernel %s: eviction fsyncs deferred = %v, want %v", tc.release, got, tc.defers)
		}
		mu.Lock()
		logged := strings.Contains(lines.String(), "fsyncing every file it closes")
		mu.Unlock()
		if logged == tc.defers {
			t.Errorf("kernel %s: reason logged = %v, want %v:\n%s", tc.release, logged, !tc.defers, lines.String())
		}
		appendAt(t, f, 1, 1000, unitMsg("a", "s", 10))
		snapshotStream(t, f) // the per-file sync path works
		if mustCheckpointIndex(t, f.cfg.Dir) != 1 {
			t.Errorf("kernel %s: no checkpoint written", tc.release)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Before Linux 5.8 the file cache fsyncs what it evicts, and a failed
// fsync is its log's sticky error. A schedule hour's log is a log too: a
// lost write-back of an hour's file stops the replica at the batch whose
// schedule closed the hour (the close meets the error), before any
// checkpoint records its bytes as durable; Persist's check of the logs
// sees the schedule's hours as well.
func TestLostScheduleWriteBackStopsTheReplica(t *testing.T) {
	release := kernelRelease
	t.Cleanup(func() { kernelRelease = release })
	kernelRelease = func() (string, error) { return "5.4.0-150-generic", nil }
	var fatal atomic.Pointer[error]
	f := unitFSM(t, func(c *Config) {
		c.MaxOpenFiles = minOpenFiles
		c.OnFatal = func(err error) { fatal.Store(&err) }
	})
	if f.store.files.DefersEvictionSyncs() {
		t.Fatal("want the per-file fsync mode")
	}
	victim := delaywheel.HourName(unitHour + 1)
	var failed atomic.Int32
	f.store.files.InjectFsync(func(file *os.File) error {
		if strings.Contains(file.Name(), victim) {
			failed.Add(1)
			return syscall.EIO // its write-back is lost
		}
		return file.Sync()
	})
	appendAt(t, f, 1, unitNow, delayedMsg("d1", "s", (unitHour+1)*delaywheel.HourMillis+5))
	snapshotStream(t, f)
	// One batch: delayed messages into 20 more hours, so the cache evicts
	// (and fsyncs) the first hour's dirty file and the schedule closes it.
	var msgs []*message.Message
	for k := int64(2); k <= 21; k++ {
		msgs = append(msgs, delayedMsg(fmt.Sprintf("d%d", k), "s", (unitHour+k)*delaywheel.HourMillis+5))
	}
	r := applyAt(f, 2, &Append{Now: unitNow, Messages: msgs})
	if failed.Load() == 0 {
		t.Fatal("the first hour's file was never fsynced for eviction")
	}
	if f.Stopped() == nil || fatal.Load() == nil || !errors.Is(*fatal.Load(), syscall.EIO) {
		t.Errorf("a lost write-back of schedule hour %s passed: the batch answered %s", victim, describe(r))
	}
	if snap, err := f.Snapshot(); err == nil {
		t.Errorf("a replica that lost a schedule hour's write-back took a snapshot (Persist: %v)", snap.Persist(&unitSink{}))
		snap.Release()
	}
	if got := mustCheckpointIndex(t, f.cfg.Dir); got != 1 {
		t.Errorf("the checkpoint records index %d, want the last good one, 1", got)
	}
	if r := applyAt(f, 3, &Append{Now: unitNow, Messages: []*message.Message{unitMsg("x", "s", 10)}}); !errors.Is(asError(r), ErrStopped) {
		t.Errorf("the next append: %s, want the replica stopped", describe(r))
	}
}
