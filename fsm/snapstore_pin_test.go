package fsm

import (
	"bytes"
	"errors"
	"io"
	"os"
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

// unitStore opens a snapshot store retaining 2 snapshots, as a node does.
func unitStore(tb testing.TB, opts ...StoreOption) *SnapshotStore {
	tb.Helper()
	store, err := NewSnapshotStore(filepath.Join(tb.TempDir(), "snapshots"), 2, hclog.NewNullLogger(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return store
}

// persistTo takes a snapshot of f into store and returns its id.
func persistTo(tb testing.TB, f *FSM, store *SnapshotStore) string {
	tb.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	sink, err := store.Create(1, f.Applied(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		tb.Fatalf("Create: %v", err)
	}
	if err := snap.Persist(sink); err != nil {
		tb.Fatalf("Persist: %v", err)
	}
	return sink.ID()
}

// openStream opens snapshot id and reads all of it.
func openStream(tb testing.TB, store *SnapshotStore, id string) []byte {
	tb.Helper()
	_, rc, err := store.Open(id)
	if err != nil {
		tb.Fatalf("Open(%s): %v", id, err)
	}
	return readAll(tb, rc)
}

// storedIDs lists the directories of store, complete or not.
func storedIDs(tb testing.TB, store *SnapshotStore) []string {
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
func listedIDs(tb testing.TB, store *SnapshotStore) []string {
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

// checkStream asserts that stream is a complete snapshot whose checksums
// all match, and returns its manifest.
func checkStream(tb testing.TB, stream []byte) *manifest {
	tb.Helper()
	m, err := readStream(bytes.NewReader(stream), func(string) (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil })
	if err != nil {
		tb.Fatalf("snapshot stream of %d bytes: %v", len(stream), err)
	}
	if streamSize(m) != int64(len(stream)) {
		tb.Fatalf("stream of %d bytes, its manifest says %d", len(stream), streamSize(m))
	}
	return m
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
		if !strings.Contains(stacks, "fsm.writeStream(") {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("a snapshot's stream writer is still running:\n%s", stacks)
		}
		runtime.Gosched()
	}
}

// A follower slower than two snapshot intervals still receives the whole
// snapshot it started on: the snapshot it reads is not reaped under it.
func TestSnapshotStoreKeepsSnapshotWhileRead(t *testing.T) {
	entries := unitWorkload(90, 3000)
	f := unitFSM(t)
	store := unitStore(t)
	applyAll(f, entries[:30])
	id := persistTo(t, f, store)
	want := openStream(t, store, id)
	if m := checkStream(t, want); len(m.files) < 3 {
		t.Fatalf("the snapshot holds %d files; the test needs several", len(m.files))
	}

	_, rc, err := store.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	head := make([]byte, 100) // inside the manifest: no file is open yet
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	// Two newer snapshots: the one being read is no longer among the two
	// the store retains.
	applyAll(f, entries[30:60])
	second := persistTo(t, f, store)
	applyAll(f, entries[60:90])
	third := persistTo(t, f, store)
	if got := listedIDs(t, store); !slices.Equal(got, []string{third, second}) {
		t.Fatalf("List = %v, want the newest two [%s %s]", got, third, second)
	}
	if got := storedIDs(t, store); !slices.Contains(got, id) {
		t.Fatalf("the snapshot being read was removed: the store holds %v", got)
	}

	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading the rest of the snapshot: %v", err)
	}
	got := append(head, rest...)
	if !bytes.Equal(got, want) {
		t.Fatalf("streamed %d bytes, want the snapshot's %d", len(got), len(want))
	}
	checkStream(t, got)
	if g := restoreInto(t, got); g.Applied() != 30 {
		t.Fatalf("restored at index %d, want 30", g.Applied())
	}

	// The last reader's Close reaps it.
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedIDs(t, store); !slices.Equal(got, []string{second, third}) && !slices.Equal(got, []string{third, second}) {
		t.Fatalf("after the reader closed, the store holds %v, want [%s %s]", got, second, third)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// A reader that gives up midway releases the file the stream had open and
// its writer goroutine, and the snapshot is reaped once it is out of date.
func TestSnapshotStoreReaderClosedEarly(t *testing.T) {
	entries := unitWorkload(90, 3000)
	f := unitFSM(t)
	store := unitStore(t)
	applyAll(f, entries[:30])
	id := persistTo(t, f, store)
	want := openStream(t, store, id)
	m := checkStream(t, want)
	headLen := len(streamMagic) + 4 + len(m.encode()) + 4

	_, rc, err := store.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, headLen+10) // into the first file
	if _, err := io.ReadFull(rc, part); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, store.dir); len(open) != 1 {
		t.Fatalf("streaming the first file, the store holds %v open, want it alone", open)
	}
	applyAll(f, entries[30:60])
	persistTo(t, f, store)
	applyAll(f, entries[60:90])
	persistTo(t, f, store)
	if got := storedIDs(t, store); len(got) != 3 || !slices.Contains(got, id) {
		t.Fatalf("with a reader open the store holds %v, want 3 snapshots including %s", got, id)
	}

	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, store.dir); len(open) != 0 {
		t.Fatalf("after Close the store still holds %v open", open)
	}
	waitNoStreamWriter(t)
	if got := storedIDs(t, store); len(got) != 2 || slices.Contains(got, id) {
		t.Fatalf("after the reader closed, the store holds %v, want the newest 2", got)
	}
	if _, _, err := store.Open(id); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of the reaped snapshot: %v, want a not-exist error", err)
	}
	// A snapshot on its way out, or not yet complete, cannot be opened.
	for _, name := range []string{id + reapSuffix, id + tmpSuffix} {
		if _, _, err := store.Open(name); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("Open(%s): %v, want ErrBadSnapshot", name, err)
		}
	}
}

// A received snapshot (kept as its stream) is kept while read, as a linked
// one is.
func TestSnapshotStoreKeepsReceivedSnapshotWhileRead(t *testing.T) {
	entries := unitWorkload(60, 3000)
	src := unitFSM(t)
	applyAll(src, entries[:30])
	stream := snapshotStream(t, src)
	store := unitStore(t)
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
	id := sink.ID()
	_, rc, err := store.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	applyAll(src, entries[30:45])
	persistTo(t, src, store)
	applyAll(src, entries[45:60])
	persistTo(t, src, store)
	if got := storedIDs(t, store); len(got) != 3 || !slices.Contains(got, id) {
		t.Fatalf("with a reader open the store holds %v, want 3 snapshots including %s", got, id)
	}
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if got := append(head, rest...); !bytes.Equal(got, stream) {
		t.Fatalf("read %d bytes of the received snapshot, want %d", len(got), len(stream))
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if open := openFilesUnder(t, store.dir); len(open) != 0 {
		t.Fatalf("after Close the store still holds %v open", open)
	}
	if got := storedIDs(t, store); len(got) != 2 || slices.Contains(got, id) {
		t.Fatalf("after the reader closed, the store holds %v, want the newest 2", got)
	}
}

// Snapshots opened while newer ones are taken and old ones reaped either
// open and stream whole, or fail to open; none streams half removed.
func TestSnapshotStoreOpenRacesReap(t *testing.T) {
	entries := unitWorkload(200, 500)
	f := unitFSM(t)
	store := unitStore(t)
	applyAll(f, entries[:10])
	persistTo(t, f, store)

	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var opened, refused int
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				metas, err := store.List()
				if err != nil {
					t.Error(err)
					return
				}
				oldest := metas[len(metas)-1].ID
				_, rc, err := store.Open(oldest)
				if err != nil {
					if !errors.Is(err, os.ErrNotExist) {
						t.Errorf("Open(%s): %v, want a clean not-exist error", oldest, err)
						return
					}
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil {
					t.Errorf("streaming %s: %v", oldest, err)
					return
				}
				if _, err := readStream(bytes.NewReader(b), func(string) (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil }); err != nil {
					t.Errorf("snapshot %s: %v", oldest, err)
					return
				}
				mu.Lock()
				opened++
				mu.Unlock()
			}
		})
	}
	for i := 10; i < len(entries) && !t.Failed(); i += 10 {
		applyAll(f, entries[i:i+10])
		persistTo(t, f, store)
	}
	close(done)
	wg.Wait()
	t.Logf("%d snapshots streamed whole, %d opens refused", opened, refused)
	if opened == 0 {
		t.Fatal("no snapshot was streamed")
	}
	if got := storedIDs(t, store); len(got) != 2 {
		t.Fatalf("after the readers stopped the store holds %v, want 2 snapshots", got)
	}
	waitNoStreamWriter(t)
	if open := openFilesUnder(t, store.dir); len(open) != 0 {
		t.Fatalf("after the readers stopped the store still holds %v open", open)
	}
}
