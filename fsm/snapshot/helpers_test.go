package snapshot

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// checkTestPath is the path check of a state machine whose snapshots
// hold DIR/NAME.seg and DIR/SUB/NAME.seg.
func checkTestPath(rel string) error {
	parts := strings.Split(rel, "/")
	ok := path.Clean(rel) == rel && strings.HasSuffix(rel, ".seg") && (len(parts) == 2 || len(parts) == 3) &&
		!strings.Contains(rel, `\`)
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".."
	}
	if !ok {
		return fmt.Errorf("%w: file path %q", ErrBad, rel)
	}
	return nil
}

// testData is the data of a state machine for the store's tests: segments
// in a directory, which grow as a log's do.
type testData struct {
	tb      testing.TB
	dir     string
	files   []string // relative paths, in the manifest's order
	version int      // how many times the data grew
	staged  int
}

// newTestData returns data of the files rels, each of size bytes; without
// rels, of segmentNames.
func newTestData(tb testing.TB, size int, rels ...string) *testData {
	tb.Helper()
	if len(rels) == 0 {
		rels = segmentNames
	}
	d := &testData{tb: tb, dir: tb.TempDir(), files: rels}
	d.grow(size)
	return d
}

// segmentNames are the files of a small broker group's snapshot.
var segmentNames = []string{
	"messages/00000000000000000000.seg",
	"messages/00000000000000001000.seg",
	"pull/00000000000000000000.seg",
	"consume/orders/00000000000000000000.seg",
}

// grow appends n bytes to every file.
func (d *testData) grow(n int) {
	d.tb.Helper()
	d.version++
	for i, rel := range d.files {
		path := filepath.Join(d.dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			d.tb.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			d.tb.Fatal(err)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(d.version*31 + i*7 + j)
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			d.tb.Fatal(err)
		}
	}
}

// manifest returns the manifest of the data as it is now.
func (d *testData) manifest() *Manifest {
	d.tb.Helper()
	m := &Manifest{Checkpoint: fmt.Appendf(nil, "state %d", d.version)}
	for _, rel := range d.files {
		fi, err := os.Stat(filepath.Join(d.dir, filepath.FromSlash(rel)))
		if err != nil {
			d.tb.Fatal(err)
		}
		m.Files = append(m.Files, File{Rel: rel, Size: fi.Size()})
	}
	return m
}

// stage links every file into a new staging directory, as a state
// machine's Snapshot does, and returns it with the manifest.
func (d *testData) stage() (string, *Manifest) {
	d.tb.Helper()
	d.staged++
	staging := filepath.Join(d.dir, "staging", fmt.Sprint(d.staged))
	for _, rel := range d.files {
		dst := LinkPath(staging, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			d.tb.Fatal(err)
		}
		if err := os.Link(filepath.Join(d.dir, filepath.FromSlash(rel)), dst); err != nil {
			d.tb.Fatal(err)
		}
	}
	return staging, d.manifest()
}

// stream returns the stream of the data as it is now.
func (d *testData) stream() []byte {
	d.tb.Helper()
	var b bytes.Buffer
	open := func(rel string) (io.ReadCloser, error) { return os.Open(filepath.Join(d.dir, filepath.FromSlash(rel))) }
	if err := Write(&b, d.manifest(), open); err != nil {
		d.tb.Fatal(err)
	}
	return b.Bytes()
}

// unitStore opens a store of checkTestPath's snapshots retaining 2, as a
// node's does.
func unitStore(tb testing.TB, opts ...Option) *Store {
	tb.Helper()
	store, err := NewStore(filepath.Join(tb.TempDir(), "snapshots"), 2, checkTestPath, hclog.NewNullLogger(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return store
}

// persistTo stages a snapshot of d and has store adopt it, as a state
// machine's Persist does, at Raft index 100 times d's version, and returns
// its id.
func persistTo(tb testing.TB, d *testData, store *Store) string {
	tb.Helper()
	staging, m := d.stage()
	sink, err := store.Create(1, 100*uint64(d.version), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		tb.Fatalf("Create: %v", err)
	}
	if err := sink.(*Sink).Adopt(staging, m); err != nil {
		tb.Fatalf("Adopt: %v", err)
	}
	if err := sink.Close(); err != nil {
		tb.Fatalf("Close: %v", err)
	}
	return sink.ID()
}

// receive writes stream into a new snapshot of store as raft does, the head
// a few bytes at a time, and returns the sink, how many bytes it took and
// the first error.
func receive(tb testing.TB, store *Store, stream []byte) (raft.SnapshotSink, int, error) {
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

// readAll reads a snapshot stream and closes it.
func readAll(tb testing.TB, rc io.ReadCloser) []byte {
	tb.Helper()
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		tb.Fatalf("reading snapshot: %v", err)
	}
	return b
}

// openStream opens snapshot id and reads all of it.
func openStream(tb testing.TB, store *Store, id string) []byte {
	tb.Helper()
	_, rc, err := store.Open(id)
	if err != nil {
		tb.Fatalf("Open(%s): %v", id, err)
	}
	return readAll(tb, rc)
}

// readStream reads a whole stream, handing each file's bytes to create's
// writer.
func readStream(r io.Reader, check func(string) error, create func(rel string) (io.WriteCloser, error)) (*Manifest, error) {
	m, err := ReadHead(r, check)
	if err != nil {
		return nil, err
	}
	if err := ReadFiles(r, m, create); err != nil {
		return nil, err
	}
	return m, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func discard(string) (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil }

// checkStream asserts that stream is a complete snapshot checkTestPath
// accepts whose checksums all match, and returns its manifest.
func checkStream(tb testing.TB, stream []byte) *Manifest {
	tb.Helper()
	m, err := readStream(bytes.NewReader(stream), checkTestPath, discard)
	if err != nil {
		tb.Fatalf("snapshot stream of %d bytes: %v", len(stream), err)
	}
	if m.StreamSize() != int64(len(stream)) {
		tb.Fatalf("stream of %d bytes, its manifest says %d", len(stream), m.StreamSize())
	}
	return m
}

// storedIDs lists the directories of store, complete or not.
func storedIDs(tb testing.TB, store *Store) []string {
	tb.Helper()
	entries, err := os.ReadDir(store.dir)
	if err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// listedIDs returns the ids List reports.
func listedIDs(tb testing.TB, store *Store) []string {
	tb.Helper()
	metas, err := store.List()
	if err != nil {
		tb.Fatal(err)
	}
	var ids []string
	for _, m := range metas {
		ids = append(ids, m.ID)
	}
	return ids
}

// sameIDs reports whether got holds the ids want, in any order.
func sameIDs(got []string, want ...string) bool {
	return len(got) == len(want) && !slices.ContainsFunc(want, func(id string) bool { return !slices.Contains(got, id) })
}

// openFilesUnder lists the files this process holds open under dir.
func openFilesUnder(tb testing.TB, dir string) []string {
	tb.Helper()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		tb.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatalf("listing open files: %v", err)
	}
	var out []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			out = append(out, target)
		}
	}
	return out
}

// waitNoStreamWriter waits until no goroutine streams a linked snapshot.
func waitNoStreamWriter(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "snapshot.Write(") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("a snapshot's stream writer is still running:\n%s", stacks)
		}
		runtime.Gosched()
	}
}

// fakeDisk is a disk.Probe reporting a fixed free space and recording the
// paths it was asked about.
type fakeDisk struct {
	mu    sync.Mutex
	free  int64
	err   error
	asked []string
}

func (d *fakeDisk) probe(path string) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, path)
	return d.free, d.err
}
