package fsm

import (
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestSyncfsReportsWriteBackFrom58(t *testing.T) {
	for release, want := range map[string]bool{
		"5.8.0": true, "5.8": true, "5.15.0-91-generic": true, "6.1.0-18-amd64": true, "10.0.1": true,
		"5.7.19": false, "5.4.0-150-generic": false, "4.19.0-26-amd64": false, "3.10.0-1160.el7.x86_64": false,
		"": false, "garbage": false, "5": false, "5.x": false,
	} {
		if got := syncfsReportsWriteBack(release); got != want {
			t.Errorf("syncfsReportsWriteBack(%q) = %v, want %v", release, got, want)
		}
	}
}

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
