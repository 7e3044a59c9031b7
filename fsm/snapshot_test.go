package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

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

// restoreInto restores stream into a fresh FSM.
func restoreInto(tb testing.TB, stream []byte) *FSM {
	tb.Helper()
	g := unitFSM(tb)
	if err := g.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		tb.Fatalf("Restore: %v", err)
	}
	return g
}

// wantTwins asserts that two FSMs hold the same state, files and reads,
// then applies the same entries to both and asserts it again.
func wantTwins(tb testing.TB, a, b *FSM, more []*raft.Log) {
	tb.Helper()
	check := func() {
		tb.Helper()
		if a.Applied() != b.Applied() {
			tb.Fatalf("applied %d and %d", a.Applied(), b.Applied())
		}
		if !bytes.Equal(stateBytes(a), stateBytes(b)) {
			tb.Fatal("states differ")
		}
		wantSameFiles(tb, a.cfg.Dir, b.cfg.Dir)
		wantSameReads(tb, a, b)
	}
	check()
	if ra, rb := applyAll(a, more), applyAll(b, more); !slices.Equal(ra, rb) {
		tb.Fatalf("the twins answered differently:\n%v\n%v", ra, rb)
	}
	check()
}

func TestSnapshotRestoreInmemStore(t *testing.T) {
	entries := unitWorkload(160, 25_000)
	src := unitFSM(t)
	applyAll(src, entries[:100])
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(1, src.Applied(), 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The snapshot is consistent even though the FSM moves on before Persist.
	atSnapshot := dataFiles(t, src.cfg.Dir)
	applyAll(src, entries[100:110])
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if _, err := os.Stat(filepath.Join(src.cfg.Dir, stagingDir, "1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Release left the staging links: %v", err)
	}
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	stream := readAll(t, rc)
	if meta.Size != int64(len(stream)) || !bytes.HasPrefix(stream, streamMagic[:]) {
		t.Fatalf("stream of %d bytes, meta size %d", len(stream), meta.Size)
	}

	g := restoreInto(t, stream)
	if g.Applied() != 100 {
		t.Fatalf("restored at index %d, want 100", g.Applied())
	}
	if files := dataFiles(t, g.cfg.Dir); !reflect.DeepEqual(files, atSnapshot) {
		t.Fatal("restored files differ from the source's at the snapshot")
	}
	applyAll(g, entries[100:110])
	wantTwins(t, src, g, entries[110:])

	// A restore replaces whatever the target held.
	h := unitFSM(t)
	applyAll(h, unitWorkload(200, 10))
	if err := h.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	applyAll(h, entries[100:])
	wantTwins(t, src, h, nil)
}

func TestSnapshotRestoreLinkStore(t *testing.T) {
	entries := unitWorkload(160, 25_000)
	src := unitFSM(t)
	applyAll(src, entries[:100])
	store, err := NewSnapshotStore(filepath.Join(t.TempDir(), "snapshots"), 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := store.Create(1, src.Applied(), 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	atSnapshot := dataFiles(t, src.cfg.Dir)
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	// The stored files are the live segments, linked, not copied.
	filesDir := filepath.Join(store.dir, sink.ID(), filesDir)
	linked := 0
	err = filepath.WalkDir(filesDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filesDir, path)
		stored, err := os.Stat(path)
		if err != nil {
			return err
		}
		for _, dir := range []string{scheduleDir, consumeDir} {
			if flat, ok := strings.CutPrefix(rel, dir+string(filepath.Separator)); ok {
				rel = filepath.Join(dir, strings.ReplaceAll(flat, "@", string(filepath.Separator))) // see stagedPath
			}
		}
		live, err := os.Stat(filepath.Join(src.cfg.Dir, dataDir, rel))
		if err != nil {
			return err
		}
		if !os.SameFile(stored, live) {
			t.Errorf("%s is a copy, not a link of the live segment", rel)
		}
		linked++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if linked != len(atSnapshot) || linked < 5 {
		t.Fatalf("%d files linked, the FSM holds %d", linked, len(atSnapshot))
	}

	// The FSM moves on (appending to the linked active segments); the
	// snapshot still streams the state at its index.
	applyAll(src, entries[100:130])
	metas, err := store.List()
	if err != nil || len(metas) != 1 || metas[0].Index != 100 || metas[0].ID != sink.ID() {
		t.Fatalf("List = %v, %v", metas, err)
	}
	meta, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	stream := readAll(t, rc)
	if meta.Size != int64(len(stream)) {
		t.Fatalf("meta size %d, stream of %d bytes", meta.Size, len(stream))
	}
	// The consume logs' links lie in one directory (see stagedPath); a
	// snapshot stored with them in one directory per subject, as before,
	// streams the same.
	flat, err := os.ReadDir(filepath.Join(filesDir, consumeDir))
	if err != nil || len(flat) == 0 {
		t.Fatalf("no consume-log links: %v", err)
	}
	for _, e := range flat {
		if e.IsDir() {
			t.Fatalf("the snapshot made a directory %s for consume-log links", e.Name())
		}
		subject, file, _ := strings.Cut(e.Name(), "@")
		nested := filepath.Join(filesDir, consumeDir, subject, file)
		if err := os.MkdirAll(filepath.Dir(nested), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(filesDir, consumeDir, e.Name()), nested); err != nil {
			t.Fatal(err)
		}
	}
	if _, rc, err := store.Open(sink.ID()); err != nil || !bytes.Equal(readAll(t, rc), stream) {
		t.Fatalf("a snapshot of the earlier layout does not stream alike (%v)", err)
	}
	g := restoreInto(t, stream)
	if g.Applied() != 100 {
		t.Fatalf("restored at index %d, want 100", g.Applied())
	}
	if files := dataFiles(t, g.cfg.Dir); !reflect.DeepEqual(files, atSnapshot) {
		t.Fatal("restored files differ from the source's at the snapshot")
	}
	applyAll(g, entries[100:130])
	wantTwins(t, src, g, entries[130:])

	// The same stream as an in-memory sink gets.
	if inmem := snapshotStream(t, g); !bytes.Equal(snapshotStream(t, src), inmem) {
		t.Fatal("twins stream different snapshots")
	}
}

func TestRestoreRefusesCorruptStream(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(50, 3000))
	stream := snapshotStream(t, src)
	m, err := readStream(bytes.NewReader(stream), func(string) (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil })
	if err != nil {
		t.Fatal(err)
	}
	headLen := len(streamMagic) + 4 + len(m.encode()) + 4
	flip := func(at int) []byte {
		b := bytes.Clone(stream)
		b[at] ^= 0x40
		return b
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"file data", flip(len(stream) - 5)},
		{"first file data", flip(headLen + 20)},
		{"file checksum", flip(len(stream) - 1)},
		{"manifest", flip(len(streamMagic) + 4 + 3)},
		{"manifest length", flip(len(streamMagic))},
		{"magic", flip(0)},
		{"truncated", stream[:len(stream)-1]},
		{"truncated header", stream[:10]},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := unitFSM(t)
			appendAt(t, g, 1, 1000, unitMsg("mine", "own", 10))
			pullAt(t, g, 2, 1000, "own", "g", "c", 1)
			before, files := stateBytes(g), dataFiles(t, g.cfg.Dir)
			err := g.Restore(io.NopCloser(bytes.NewReader(tc.b)))
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("Restore: %v, want ErrBadSnapshot", err)
			}
			if g.Applied() != 2 {
				t.Fatalf("applied %d after a failed restore, want 2", g.Applied())
			}
			wantStateUnchanged(t, g, before)
			if !reflect.DeepEqual(files, dataFiles(t, g.cfg.Dir)) {
				t.Fatal("a failed restore changed the data files")
			}
			if _, err := os.Stat(filepath.Join(g.cfg.Dir, restoreDir)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed restore left %s: %v", restoreDir, err)
			}
			// Still usable.
			if m, err := g.Message("own", 0); err != nil || m.ID != "mine" {
				t.Fatalf("Message after a failed restore: %v, %v", m, err)
			}
			if r := appendAt(t, g, 3, 1000, unitMsg("mine", "own", 1), unitMsg("next", "own", 1)); r.Messages[0].Status != Duplicate || r.Messages[1].Status != Appended {
				t.Fatalf("append after a failed restore: %+v", r.Messages)
			}
			if r := pullAt(t, g, 4, 1000, "own", "g", "c", 5); len(r.Entries) != 1 || r.Entries[0].ConsumeSeq != 1 {
				t.Fatalf("pull after a failed restore: %+v", r.Entries)
			}
		})
	}

	// A stream whose checksums hold but whose checkpoint does not decode.
	var b bytes.Buffer
	if err := writeStream(&b, &manifest{checkpoint: []byte("not a checkpoint")}, nil); err != nil {
		t.Fatal(err)
	}
	g := unitFSM(t)
	appendAt(t, g, 1, 1000, unitMsg("mine", "own", 10))
	if err := g.Restore(io.NopCloser(&b)); !errors.Is(err, ErrBadCheckpoint) {
		t.Fatalf("Restore of a bad checkpoint: %v, want ErrBadCheckpoint", err)
	}
	if m, err := g.Message("own", 0); err != nil || m.ID != "mine" || g.Applied() != 1 {
		t.Fatalf("after a failed restore: %v, %v, applied %d", m, err, g.Applied())
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func TestStreamRoundTrip(t *testing.T) {
	src := busyFSM(t)
	stream := snapshotStream(t, src)
	got := map[string][]byte{}
	m, err := readStream(bytes.NewReader(stream), func(rel string) (io.WriteCloser, error) {
		if _, dup := got[rel]; dup {
			t.Fatalf("file %s created twice", rel)
		}
		got[rel] = nil
		return &captureWriter{name: rel, into: got}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := dataFiles(t, src.cfg.Dir)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stream files %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	if cp, err := decodeCheckpoint(m.checkpoint); err != nil || cp.st.applied != src.Applied() {
		t.Fatalf("stream checkpoint: %v", err)
	}
	if streamSize(m) != int64(len(stream)) {
		t.Fatalf("streamSize %d, stream %d bytes", streamSize(m), len(stream))
	}
}

type captureWriter struct {
	name string
	into map[string][]byte
}

func (w *captureWriter) Write(p []byte) (int, error) {
	w.into[w.name] = append(w.into[w.name], p...)
	return len(p), nil
}

func (w *captureWriter) Close() error { return nil }

func TestCheckSnapPath(t *testing.T) {
	for _, tc := range []struct {
		rel string
		ok  bool
	}{
		{"messages/00000000000000000000.seg", true},
		{"pull/00000000000000000000.seg", true},
		{"consume/orders.created/00000000000000000000.seg", true},
		{"messages/x.seg", true},
		{"checkpoint", false},
		{"messages/x", false},
		{"messages/../../x.seg", false},
		{"../x.seg", false},
		{"/etc/x.seg", false},
		{"messages//x.seg", false},
		{"messages/./x.seg", false},
		{"messages/sub/x.seg", false},
		{"consume/../x.seg", false},
		{"consume/../messages/x.seg", false},
		{"consume/a/b/x.seg", false},
		{"consume/.hidden/x.seg", false},
		{"consume/x.seg", false},
		{"other/x.seg", false},
		{"messages/.seg", true}, // a name the logs ignore, inside the store
		{"messages/..seg", true},
		{`messages\..\x.seg`, false},
		{"", false},
	} {
		err := checkSnapPath(tc.rel)
		if (err == nil) != tc.ok {
			t.Errorf("checkSnapPath(%q) = %v, want ok=%v", tc.rel, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("checkSnapPath(%q) = %v, want ErrBadSnapshot", tc.rel, err)
		}
	}
}

func TestSnapshotStore(t *testing.T) {
	if _, err := NewSnapshotStore(t.TempDir(), 0, hclog.NewNullLogger()); err == nil {
		t.Fatal("a store retaining no snapshots was accepted")
	}
	dir := filepath.Join(t.TempDir(), "snapshots")
	// An abandoned snapshot is removed when the store opens.
	if err := os.MkdirAll(filepath.Join(dir, "1-1-1"+tmpSuffix), 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := NewSnapshotStore(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("leftover snapshot kept: %v", entries)
	}
	if metas, err := store.List(); err != nil || len(metas) != 0 {
		t.Fatalf("List of an empty store: %v, %v", metas, err)
	}

	f := unitFSM(t)
	streams := map[string][]byte{}
	var ids []string
	for i := range 3 {
		applyAll(f, unitWorkload(10*(i+1), 100)[10*i:])
		snap, err := f.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink, err := store.Create(1, f.Applied(), 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		snap.Release()
		ids = append(ids, sink.ID())
		streams[sink.ID()] = snapshotStream(t, f)
	}
	metas, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, m := range metas {
		got = append(got, m.Index)
	}
	if !slices.Equal(got, []uint64{30, 20}) || metas[0].ID != ids[2] || metas[1].ID != ids[1] {
		t.Fatalf("List = indices %v, want [30 20] newest first", got)
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
		_, rc, err := store.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, rc); !bytes.Equal(got, streams[id]) {
			t.Fatalf("snapshot %s streams %d bytes, want the FSM's %d", id, len(got), len(streams[id]))
		}
	}

	// A snapshot received from a leader is kept as the raw stream.
	sink, err := store.Create(1, 40, 3, raft.Configuration{}, 1, nil)
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
	g := restoreInto(t, latest)
	if g.Applied() != 30 {
		t.Fatalf("restored the received snapshot at %d, want 30", g.Applied())
	}
	if metas, _ := store.List(); len(metas) != 2 || metas[0].ID != sink.ID() {
		t.Fatalf("after receiving: List %v", metas)
	}

	// A canceled snapshot leaves nothing.
	sink, err = store.Create(1, 50, 3, raft.Configuration{}, 1, nil)
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
	if metas, _ := store.List(); len(metas) != 2 || metas[0].Index != 40 {
		t.Fatalf("after cancel: List %v", metas)
	}
}

func TestReadStreamAllocatesWhatArrives(t *testing.T) {
	// A header claiming the largest manifest, followed by a few bytes: the
	// reader must fail without allocating what the header claims.
	head := append(streamMagic[:], 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(head[8:], maxManifest)
	head = append(head, "short"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := readStream(bytes.NewReader(head), func(string) (io.WriteCloser, error) {
		t.Fatal("create called")
		return nil, nil
	})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("readStream: %v, want ErrBadSnapshot", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Fatalf("reading a %d-byte stream allocated %d bytes", len(head), n)
	}
}
