package snapshot

import (
	"bytes"
	"errors"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
)

// A follower slower than two snapshot intervals still receives the whole
// snapshot it started on: the snapshot it reads is not reaped under it,
// and streams the files as they were when it was taken, however they grew
// since.
func TestStoreKeepsSnapshotWhileRead(t *testing.T) {
	d := newTestData(t, 3000)
	store := unitStore(t)
	id := persistTo(t, d, store)
	want := d.stream()
	if got := openStream(t, store, id); !bytes.Equal(got, want) {
		t.Fatalf("the snapshot streams %d bytes, want the data's %d", len(got), len(want))
	}

	_, rc, err := store.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	head := make([]byte, 100) // inside the manifest: no file is open yet
	if m := checkStream(t, want); m.StreamSize()-m.FilesSize()-4*int64(len(m.Files)) <= int64(len(head)) {
		t.Fatalf("the manifest is shorter than the %d bytes read", len(head))
	}
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	// Two newer snapshots: the one being read is no longer among the two
	// the store retains.
	d.grow(1000)
	second := persistTo(t, d, store)
	d.grow(1000)
	third := persistTo(t, d, store)
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
	if got := append(head, rest...); !bytes.Equal(got, want) {
		t.Fatalf("streamed %d bytes, want the snapshot's %d", len(got), len(want))
	}

	// The last reader's Close reaps it.
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if got := storedIDs(t, store); !sameIDs(got, second, third) {
		t.Fatalf("after the reader closed, the store holds %v, want [%s %s]", got, second, third)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// A reader that gives up midway releases the file the stream had open and
// its writer goroutine, and the snapshot is reaped once it is out of date.
func TestStoreReaderClosedEarly(t *testing.T) {
	d := newTestData(t, 3000)
	store := unitStore(t)
	id := persistTo(t, d, store)
	m := checkStream(t, openStream(t, store, id))
	headLen := headerSize + len(m.encode()) + 4

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
	d.grow(1000)
	persistTo(t, d, store)
	d.grow(1000)
	persistTo(t, d, store)
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
		if _, _, err := store.Open(name); !errors.Is(err, ErrBad) {
			t.Fatalf("Open(%s): %v, want ErrBad", name, err)
		}
	}
}

// A received snapshot (kept as its stream) is kept while read, as a linked
// one is.
func TestStoreKeepsReceivedSnapshotWhileRead(t *testing.T) {
	d := newTestData(t, 3000)
	stream := d.stream()
	store := unitStore(t)
	sink, _, err := receive(t, store, stream)
	if err != nil {
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
	d.grow(1000)
	persistTo(t, d, store)
	d.grow(1000)
	persistTo(t, d, store)
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
func TestStoreOpenRacesReap(t *testing.T) {
	d := newTestData(t, 500)
	store := unitStore(t)
	persistTo(t, d, store)

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
				if _, err := readStream(bytes.NewReader(b), checkTestPath, discard); err != nil {
					t.Errorf("snapshot %s: %v", oldest, err)
					return
				}
				mu.Lock()
				opened++
				mu.Unlock()
			}
		})
	}
	streamed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return opened
	}
	// At least 20 snapshots, and more until a reader streamed one whole.
	for i := 0; (i < 20 || streamed() == 0 && i < 10_000) && !t.Failed(); i++ {
		d.grow(100)
		persistTo(t, d, store)
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
