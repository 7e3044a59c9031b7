package fsm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/version"
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
	if meta.Size != int64(len(stream)) || !bytes.HasPrefix(stream, []byte("QMQSNAP1")) {
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
	storeDir := filepath.Join(t.TempDir(), "snapshots")
	store, err := NewSnapshotStore(storeDir, 2, hclog.NewNullLogger())
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
	if src.store.timeline.End() != 0 {
		t.Fatal("a group at version 1 wrote a timeline")
	}
	// An empty timeline is not in the snapshot (see snapshotFiles); a
	// restore opens it empty.
	noTimeline := func(files map[string][]byte) map[string][]byte {
		for rel := range files {
			if strings.HasPrefix(rel, timelineDir+"/") {
				delete(files, rel)
			}
		}
		return files
	}
	noTimeline(atSnapshot)
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	// The stored files are the live segments, linked, not copied.
	filesDir := filepath.Join(storeDir, sink.ID(), "files")
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
				rel = filepath.Join(dir, strings.ReplaceAll(flat, "@", string(filepath.Separator))) // see snapshot.LinkPath
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
	// The consume logs' links lie in one directory (see snapshot.LinkPath); a
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
	if files := noTimeline(dataFiles(t, g.cfg.Dir)); !reflect.DeepEqual(files, atSnapshot) {
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
	headLen := int(m.StreamSize()-m.FilesSize()) - 4*len(m.Files) // all but the files and their checksums
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
		{"manifest", flip(8 + 4 + 3)}, // past the magic and the manifest's length
		{"manifest length", flip(8)},
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
	if err := snapshot.Write(&b, &snapshot.Manifest{Checkpoint: []byte("not a checkpoint")}, nil); err != nil {
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
	t.Run("V1", func(t *testing.T) { testStreamRoundTrip(t, busyFSM(t)) })
	t.Run("V2", func(t *testing.T) {
		src := busyFSM(t)
		resultAs[*VersionResult](t, applyAt(src, 12, &SetVersion{Now: 2000, Version: version.V2}))
		pullAt(t, src, 13, 2000, "s", "g3", "c9", 3)
		if src.store.timeline.End() == 0 {
			t.Fatal("no timeline at V2")
		}
		testStreamRoundTrip(t, src)
	})
}

// testStreamRoundTrip checks that src's snapshot stream carries its data
// files (an empty timeline but for its empty segment, which it leaves out)
// and its checkpoint.
func testStreamRoundTrip(t *testing.T, src *FSM) {
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
	if src.store.timeline.End() == 0 {
		for rel := range want {
			if strings.HasPrefix(rel, timelineDir+"/") {
				delete(want, rel)
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stream files %v, want %v", sortedKeys(got), sortedKeys(want))
	}
	if cp, err := decodeCheckpoint(m.Checkpoint); err != nil || cp.st.applied != src.Applied() {
		t.Fatalf("stream checkpoint: %v", err)
	}
	if m.StreamSize() != int64(len(stream)) {
		t.Fatalf("StreamSize %d, stream %d bytes", m.StreamSize(), len(stream))
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

// snapPathCases are paths a snapshot's manifest may name, or not.
var snapPathCases = []struct {
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
	{"journal/00000000000000000000.seg", true},
	{"schedule/2026113014/00000000000000000000.seg", true},
	{"schedule/2026113014/dispatched/00000000000000000000.seg", true},
	{"schedule/2026113014/other/00000000000000000000.seg", false},
	{"schedule/20261130/00000000000000000000.seg", false},
	{"schedule/00000000000000000000.seg", false},
}

func TestCheckSnapPath(t *testing.T) {
	for _, tc := range snapPathCases {
		err := checkSnapPath(tc.rel)
		if (err == nil) != tc.ok {
			t.Errorf("checkSnapPath(%q) = %v, want ok=%v", tc.rel, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("checkSnapPath(%q) = %v, want ErrBadSnapshot", tc.rel, err)
		}
	}
}
