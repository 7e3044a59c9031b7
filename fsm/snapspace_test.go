package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// fakeDisk is a disk.Probe reporting a fixed free space and recording the
// paths it was asked about.
type fakeDisk struct {
	mu    sync.Mutex
	free  int64
	err   error
	asked []string
	check func(path string) // called on each probe, if set
}

func (d *fakeDisk) probe(path string) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, path)
	if d.check != nil {
		d.check(path)
	}
	return d.free, d.err
}

// wantErrNoSpace asserts that err wraps ErrNoSpace and names both counts.
func wantErrNoSpace(tb testing.TB, err error, need, free int64) {
	tb.Helper()
	if !errors.Is(err, ErrNoSpace) {
		tb.Fatalf("error %v, want ErrNoSpace", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("needs %d bytes free", need)) || !strings.Contains(msg, fmt.Sprintf(", %d are", free)) {
		tb.Fatalf("error %q does not say %d bytes are needed and %d free", msg, need, free)
	}
}

func TestRestoreRefusesWithoutSpace(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(30, 3000))
	stream := snapshotStream(t, src)
	m := checkStream(t, stream)
	need := m.FilesSize() + SpaceReserve
	if m.FilesSize() == 0 {
		t.Fatal("the snapshot holds no data")
	}

	for _, tc := range []struct {
		name string
		free int64
		ok   bool
	}{
		{"just under", need - 1, false},
		{"exactly", need, true},
		{"just over", need + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeDisk{free: 1 << 40} // room to apply the entry below
			var dir string
			fake.check = func(string) {
				// Asked before anything is written; a leftover restore is gone.
				if _, err := os.Stat(filepath.Join(dir, restoreDir)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("probe called with %s in place: %v", restoreDir, err)
				}
			}
			g := unitFSM(t, func(c *Config) { c.DiskFree = fake.probe })
			dir = g.cfg.Dir
			appendAt(t, g, 1, 1000, unitMsg("mine", "own", 10))
			fake.free, fake.asked = tc.free, nil
			before, files := stateBytes(g), dataFiles(t, dir)
			if err := os.MkdirAll(filepath.Join(dir, restoreDir, "messages"), 0o755); err != nil {
				t.Fatal(err)
			}
			err := g.Restore(io.NopCloser(bytes.NewReader(stream)))
			if !reflect.DeepEqual(fake.asked, []string{dir}) {
				t.Fatalf("the probe was asked about %v, want once about %s", fake.asked, dir)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				if g.Applied() != src.Applied() {
					t.Fatalf("restored at %d, want %d", g.Applied(), src.Applied())
				}
				return
			}
			wantErrNoSpace(t, err, need, tc.free)
			if _, err := os.Stat(filepath.Join(dir, restoreDir)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore left %s: %v", restoreDir, err)
			}
			wantStateUnchanged(t, g, before)
			if !reflect.DeepEqual(files, dataFiles(t, dir)) {
				t.Fatal("a refused restore changed the data files")
			}
			if m, err := g.Message("own", 0); err != nil || m.ID != "mine" || g.Applied() != 1 {
				t.Fatalf("after a refused restore: %v, %v, applied %d", m, err, g.Applied())
			}
		})
	}
}

// A snapshot received whole but refused at restore (CatchUp at start-up)
// stays in the store, to be restored once there is room.
func TestCatchUpRefusesWithoutSpace(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(30, 3000))
	stream := snapshotStream(t, src)
	store, err := NewSnapshotStore(t.TempDir(), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(1, 30, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(stream); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	fake := &fakeDisk{free: SpaceReserve}
	g := unitFSM(t, func(c *Config) { c.DiskFree = fake.probe })
	if err := g.CatchUp(store); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("CatchUp: %v, want ErrNoSpace", err)
	}
	if metas, err := store.List(); err != nil || len(metas) != 1 || metas[0].ID != sink.ID() {
		t.Fatalf("List after the refusal: %v, %v", metas, err)
	}
	fake.free = 1 << 40
	if err := g.CatchUp(store); err != nil {
		t.Fatal(err)
	}
	if g.Applied() != src.Applied() {
		t.Fatalf("caught up to %d, want %d", g.Applied(), src.Applied())
	}
}

func TestConfigRequiresDiskFree(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	if cfg.DiskFree == nil {
		t.Fatal("DefaultConfig has no DiskFree")
	}
	cfg.DiskFree = nil
	if err := cfg.Validate(); err == nil {
		t.Fatal("a config without DiskFree was accepted")
	}
}
