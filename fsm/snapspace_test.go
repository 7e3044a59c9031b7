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

// receive writes stream into a new snapshot of store as raft does, the head
// a few bytes at a time, and returns the sink, how many bytes it took and
// the first error.
func receive(tb testing.TB, store *SnapshotStore, stream []byte) (raft.SnapshotSink, int, error) {
	tb.Helper()
	sink, err := store.Create(1, 30, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		tb.Fatal(err)
	}
	took := 0
	for len(stream) > 0 {
		chunk := 64 << 10
		if took < 1000 {
			chunk = 3
		}
		chunk = min(chunk, len(stream))
		n, err := sink.Write(stream[:chunk])
		took += n
		if err != nil {
			return sink, took, err
		}
		stream = stream[chunk:]
	}
	return sink, took, nil
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

func TestSnapshotStoreRefusesStreamWithoutSpace(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(30, 3000))
	stream := snapshotStream(t, src)
	m := checkStream(t, stream)
	headLen := headerSize + len(m.encode()) + 4
	need := 2*int64(len(stream)) + SpaceReserve

	for _, tc := range []struct {
		name string
		free int64
		ok   bool
	}{
		{"just under", need - 1, false},
		{"exactly", need, true},
		{"just over", need + 1, true},
		{"empty disk", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeDisk{free: tc.free}
			store := unitStore(t, WithFreeSpace(fake.probe))
			sink, took, err := receive(t, store, stream)
			if !reflect.DeepEqual(fake.asked, []string{store.dir}) {
				t.Fatalf("the probe was asked about %v, want once about %s", fake.asked, store.dir)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("Write: %v", err)
				}
				if err := sink.Close(); err != nil {
					t.Fatal(err)
				}
				if got := openStream(t, store, sink.ID()); !bytes.Equal(got, stream) {
					t.Fatalf("stored %d bytes, want %d", len(got), len(stream))
				}
				return
			}
			wantErrNoSpace(t, err, need, tc.free)
			// Refused as soon as the manifest arrived, before any file's bytes.
			if took > headLen {
				t.Fatalf("%d bytes taken before the refusal; the head is %d", took, headLen)
			}
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
			if _, err := sink.Write(stream[took:]); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Write after the refusal: %v, want ErrNoSpace", err)
			}
			if err := sink.Close(); !errors.Is(err, ErrNoSpace) {
				t.Fatalf("Close after the refusal: %v, want ErrNoSpace", err)
			}
			if err := sink.Cancel(); err != nil {
				t.Fatalf("Cancel after the refusal: %v", err)
			}
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
			if ids := listedIDs(t, store); len(ids) != 0 {
				t.Fatalf("List after a refusal: %v", ids)
			}
		})
	}

	// A probe that fails does not stop the snapshot.
	fake := &fakeDisk{err: errors.New("statfs: not supported")}
	store := unitStore(t, WithFreeSpace(fake.probe))
	sink, _, err := receive(t, store, stream)
	if err != nil {
		t.Fatalf("Write with a failing probe: %v", err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if len(fake.asked) != 1 {
		t.Fatalf("the probe was asked %d times", len(fake.asked))
	}
}

func TestSnapshotStoreRefusesMalformedHead(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(10, 100))
	stream := snapshotStream(t, src)
	flip := func(at int) []byte {
		b := bytes.Clone(stream)
		b[at] ^= 0x40
		return b
	}
	for _, tc := range []struct {
		name   string
		stream []byte
	}{
		{"magic", flip(0)},
		{"manifest length", flip(headerSize - 1)},
		{"manifest", flip(headerSize + 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := &fakeDisk{free: 1 << 62}
			store := unitStore(t, WithFreeSpace(fake.probe))
			sink, _, err := receive(t, store, tc.stream)
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("Write: %v, want ErrBadSnapshot", err)
			}
			sink.Cancel()
			if got := storedIDs(t, store); len(got) != 0 {
				t.Fatalf("a refused snapshot left %v", got)
			}
		})
	}
}

func TestRestoreRefusesWithoutSpace(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(30, 3000))
	stream := snapshotStream(t, src)
	m := checkStream(t, stream)
	need := filesSize(m) + SpaceReserve
	if filesSize(m) == 0 {
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
	store := unitStore(t)
	sink, _, err := receive(t, store, stream)
	if err != nil {
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
	if ids := listedIDs(t, store); len(ids) != 1 || ids[0] != sink.ID() {
		t.Fatalf("List after the refusal: %v", ids)
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

// The sizes a manifest lists add up to at most maxSnapshotBytes, so that
// the space checks' sums cannot overflow.
func TestManifestBoundsTotalSize(t *testing.T) {
	for _, tc := range []struct {
		last int64
		ok   bool
	}{
		{5, true},
		{4, true},
		{6, false},
	} {
		m := &manifest{checkpoint: []byte("x"), files: []snapFile{
			{rel: "messages/a.seg", size: maxSnapshotBytes - 5},
			{rel: "messages/b.seg", size: tc.last},
		}}
		got, err := decodeManifest(m.encode())
		if !tc.ok {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("a manifest of %d bytes: %v, want ErrBadSnapshot", maxSnapshotBytes-5+tc.last, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("a manifest of %d bytes: %v", maxSnapshotBytes-5+tc.last, err)
		}
		if size := streamSize(got); size < filesSize(got) || 2*size+SpaceReserve < 0 {
			t.Fatalf("stream size %d overflows", size)
		}
	}
	// Sizes that would wrap around int64 together.
	m := &manifest{checkpoint: []byte("x")}
	for i := range 4 {
		m.files = append(m.files, snapFile{rel: fmt.Sprintf("messages/%d.seg", i), size: 1 << 62})
	}
	if _, err := decodeManifest(m.encode()); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a manifest of 2^64 bytes: %v, want ErrBadSnapshot", err)
	}
}
