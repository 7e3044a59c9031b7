package snapshot

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestStore(t *testing.T) {
	if _, err := NewStore(t.TempDir(), 0, checkTestPath, hclog.NewNullLogger()); err == nil {
		t.Fatal("a store retaining no snapshots was accepted")
	}
	if _, err := NewStore(t.TempDir(), 2, nil, hclog.NewNullLogger()); err == nil {
		t.Fatal("a store without a path check was accepted")
	}
	dir := filepath.Join(t.TempDir(), "snapshots")
	// An abandoned snapshot is removed when the store opens.
	if err := os.MkdirAll(filepath.Join(dir, "1-1-1"+tmpSuffix), 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := NewStore(dir, 2, checkTestPath, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("leftover snapshot kept: %v", entries)
	}
	if metas, err := store.List(); err != nil || len(metas) != 0 {
		t.Fatalf("List of an empty store: %v, %v", metas, err)
	}

	d := newTestData(t, 100)
	streams := map[string][]byte{}
	var ids []string
	for i := range 3 {
		if i > 0 {
			d.grow(100)
		}
		id := persistTo(t, d, store)
		ids = append(ids, id)
		streams[id] = d.stream()
	}
	metas, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, m := range metas {
		got = append(got, m.Index)
	}
	if !slices.Equal(got, []uint64{300, 200}) || metas[0].ID != ids[2] || metas[1].ID != ids[1] {
		t.Fatalf("List = indices %v, want [300 200] newest first", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("the store holds %d snapshots, want 2", len(entries))
	}
	if _, _, err := store.Open(ids[0]); err == nil {
		t.Fatal("Open of a reaped snapshot succeeded")
	}
	for _, id := range []string{"nope", "..", ".", "../x", `a\b`, ""} {
		if _, rc, err := store.Open(id); err == nil {
			rc.Close()
			t.Fatalf("Open(%q) succeeded", id)
		}
	}
	for _, id := range ids[1:] {
		meta, rc, err := store.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, rc); !bytes.Equal(got, streams[id]) || meta.Size != int64(len(got)) {
			t.Fatalf("snapshot %s streams %d bytes (meta %d), want the data's %d", id, len(got), meta.Size, len(streams[id]))
		}
	}

	// A snapshot received from a leader is kept as the raw stream.
	sink, err := store.Create(1, 400, 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	latest := streams[ids[2]]
	for chunk := range slices.Chunk(latest, 1000) {
		if _, err := sink.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rc); !bytes.Equal(got, latest) || meta.Size != int64(len(latest)) || meta.Term != 3 {
		t.Fatalf("received snapshot: %d bytes (meta %+v), want %d", len(got), meta, len(latest))
	}
	if _, err := os.Stat(filepath.Join(dir, sink.ID(), streamFile)); err != nil {
		t.Fatalf("the received snapshot is not kept as its stream: %v", err)
	}
	if metas, _ := store.List(); len(metas) != 2 || metas[0].ID != sink.ID() {
		t.Fatalf("after receiving: List %v", metas)
	}
	if _, err := sink.Write([]byte("more")); err == nil {
		t.Fatal("a Write after Close succeeded")
	}

	// A canceled snapshot leaves nothing.
	sink, err = store.Create(1, 500, 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.Write([]byte("partial"))
	if err := sink.Cancel(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			t.Fatalf("canceled snapshot left %s", e.Name())
		}
	}
	if metas, _ := store.List(); len(metas) != 2 || metas[0].Index != 400 {
		t.Fatalf("after cancel: List %v", metas)
	}
}

// A snapshot's files are the links the state machine staged, moved into
// the store: nothing is copied, and the staging directory is gone.
func TestStoreAdoptsLinks(t *testing.T) {
	d := newTestData(t, 100)
	store := unitStore(t)
	staging, m := d.stage()
	sink, err := store.Create(1, 100, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.(*Sink).Adopt(staging, m); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staging directory is still there: %v", err)
	}
	for _, f := range m.Files {
		stored, err := os.Stat(LinkPath(filepath.Join(store.dir, sink.ID(), filesDir), f.Rel))
		if err != nil {
			t.Fatal(err)
		}
		live, err := os.Stat(filepath.Join(d.dir, filepath.FromSlash(f.Rel)))
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(stored, live) {
			t.Errorf("%s is a copy, not a link of the live file", f.Rel)
		}
	}
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, rc); !bytes.Equal(got, d.stream()) || meta.Size != int64(len(got)) {
		t.Fatalf("the adopted snapshot streams %d bytes (meta %d), want the data's %d", len(got), meta.Size, len(d.stream()))
	}

	// A linked file that went missing fails the stream, not silently.
	if err := os.Remove(LinkPath(filepath.Join(store.dir, sink.ID(), filesDir), m.Files[1].Rel)); err != nil {
		t.Fatal(err)
	}
	_, rc, err = store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("streaming a snapshot missing a link: %v, want a not-exist error", err)
	}
}

func TestLinkPath(t *testing.T) {
	for rel, want := range map[string]string{
		"messages/00000000000000000000.seg":                       "messages/00000000000000000000.seg",
		"consume/orders.created/00000000000000000000.seg":         "consume/orders.created@00000000000000000000.seg",
		"schedule/2026113014/00000000000000000000.seg":            "schedule/2026113014@00000000000000000000.seg",
		"schedule/2026113014/dispatched/00000000000000000000.seg": "schedule/2026113014@dispatched@00000000000000000000.seg",
	} {
		if got := LinkPath("/s/files", rel); got != filepath.Join("/s/files", filepath.FromSlash(want)) {
			t.Errorf("LinkPath(%s) = %s, want /s/files/%s", rel, got, want)
		}
	}
}

// A snapshot stored with its links at their paths, as consume-log links
// once were, streams as one whose links are folded.
func TestStoreStreamsNestedLinks(t *testing.T) {
	d := newTestData(t, 100)
	store := unitStore(t)
	id := persistTo(t, d, store)
	files := filepath.Join(store.dir, id, filesDir)
	nested := 0
	for _, rel := range d.files {
		path := filepath.Join(files, filepath.FromSlash(rel))
		if link := LinkPath(files, rel); link != path {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(link, path); err != nil {
				t.Fatal(err)
			}
			nested++
		}
	}
	if nested == 0 {
		t.Fatal("no link is folded; the test needs one")
	}
	if got := openStream(t, store, id); !bytes.Equal(got, d.stream()) {
		t.Fatalf("a snapshot of nested links streams %d bytes, want the data's %d", len(got), len(d.stream()))
	}
}
