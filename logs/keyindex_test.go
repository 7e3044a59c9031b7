package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keyedPayload is a record whose key is its first 8 bytes.
func keyedPayload(key uint64) []byte {
	p := make([]byte, 24)
	binary.LittleEndian.PutUint64(p, key)
	return p
}

func payloadKeys(p []byte, add func(uint64)) { add(binary.LittleEndian.Uint64(p)) }

// waitReady waits until every sealed segment of ki is indexed.
func waitReady(t *testing.T, ki *KeyIndex) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ki.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("key index not built")
		}
		time.Sleep(time.Millisecond)
	}
}

// keyOf maps record i to its key: keys repeat every 50 records, and two
// keys differ only in their low 24 bits, so their fingerprints collide.
func keyOf(i int) uint64 {
	if i%50 == 7 {
		return 0xabcdef0123000001
	}
	return uint64(i%50)<<40 | 0x1234
}

func writeKeyed(t *testing.T, l *Log, ki *KeyIndex, from, n int) []int64 {
	t.Helper()
	var offs []int64
	for i := from; i < from+n; i++ {
		p := keyedPayload(keyOf(i))
		off, err := l.Append(p)
		if err != nil {
			t.Fatal(err)
		}
		ki.Add(off, keyOf(i))
		offs = append(offs, off)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	return offs
}

// lookupAll returns the offsets Lookup visits for key whose record has key.
func lookupAll(t *testing.T, l *Log, ki *KeyIndex, key uint64) []int64 {
	t.Helper()
	var out []int64
	err := ki.Lookup(key, func(off int64) bool {
		p, err := l.Read(off)
		if err != nil {
			t.Fatal(err)
		}
		if binary.LittleEndian.Uint64(p) == key {
			out = append(out, off)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func wantOffsets(offs []int64, key uint64, from int) []int64 {
	var want []int64
	for i := len(offs) - 1; i >= 0; i-- {
		if keyOf(from+i) == key {
			want = append(want, offs[i])
		}
	}
	return want
}

func openKeyed(t *testing.T, dir string, opts Options) (*Log, *KeyIndex) {
	t.Helper()
	l, err := Open(filepath.Join(dir, "log"), KindMessage, opts)
	if err != nil {
		t.Fatal(err)
	}
	ki, err := OpenKeyIndex(l, filepath.Join(dir, "index"), payloadKeys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ki.Close(); l.Close() })
	return l, ki
}

func TestKeyIndexAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1000}
	l, ki := openKeyed(t, dir, opts)
	offs := writeKeyed(t, l, ki, 0, 400)
	if l.SegmentCount() < 5 {
		t.Fatalf("%d segments", l.SegmentCount())
	}
	check := func() {
		for _, k := range []uint64{keyOf(0), keyOf(7), keyOf(49), keyOf(3)} {
			got, want := lookupAll(t, l, ki, k), wantOffsets(offs, k, 0)
			if !slicesEqual(got, want) {
				t.Fatalf("key %x: %v, want %v", k, got, want)
			}
		}
		if got := lookupAll(t, l, ki, 0xabcdef0123000002); len(got) != 0 { // collides with keyOf(7)
			t.Fatalf("colliding key found %v", got)
		}
	}
	check()
	waitReady(t, ki)
	check()
	ki.Close() // writes every sealed segment's sidecar
	st := ki.Stats()
	if st.DiskBytes != int64(st.Segments)*(indexHeaderSize+indexFanoutSize)+int64(400-st.ActiveEntries)*indexEntrySize {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("in memory: %d bytes for %d active entries and %d sealed segments; on disk %.1f bytes a record",
		st.MemoryBytes, st.ActiveEntries, st.Segments, float64(st.DiskBytes)/float64(400-st.ActiveEntries))
	l.Close()
	l, ki = openKeyed(t, dir, opts)
	defer l.Close()
	defer ki.Close()
	waitReady(t, ki)
	check()
}

func slicesEqual(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A sidecar corrupted or deleted is rebuilt on open, byte for byte.
func TestKeyIndexRebuildsBadSidecar(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1000}
	l, ki := openKeyed(t, dir, opts)
	offs := writeKeyed(t, l, ki, 0, 200)
	waitReady(t, ki)
	segs := l.Segments()
	p0, p1 := ki.Path(segs[0].Base), ki.Path(segs[1].Base)
	orig0, _ := os.ReadFile(p0)
	orig1, _ := os.ReadFile(p1)
	ki.Close()
	l.Close()
	bad := append([]byte(nil), orig0...)
	bad[len(bad)-3] ^= 0xff
	os.WriteFile(p0, bad, 0o644)
	os.Remove(p1)
	l, ki = openKeyed(t, dir, opts)
	defer l.Close()
	defer ki.Close()
	waitReady(t, ki)
	for p, want := range map[string][]byte{p0: orig0, p1: orig1} {
		got, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s rebuilt differs (%v)", p, err)
		}
	}
	if got, want := lookupAll(t, l, ki, keyOf(1)), wantOffsets(offs, keyOf(1), 0); !slicesEqual(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

// Retention removes the sidecars of removed segments; a crash-cut tail is
// rebuilt on open without the records cut.
func TestKeyIndexRetentionAndTruncate(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1000}
	l, ki := openKeyed(t, dir, opts)
	offs := writeKeyed(t, l, ki, 0, 200)
	waitReady(t, ki)
	segs := l.Segments()
	if _, err := l.RemoveBefore(segs[2].Base); err != nil {
		t.Fatal(err)
	}
	if err := ki.Retain(); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs[:2] {
		if _, err := os.Stat(ki.Path(s.Base)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("sidecar of removed segment %d: %v", s.Base, err)
		}
	}
	if got := lookupAll(t, l, ki, keyOf(1)); len(got) == 0 || got[len(got)-1] < segs[2].Base {
		t.Fatalf("lookup after retention: %v", got)
	}
	ki.Close()
	l.Close()
	// Cut back into a sealed segment, as an owner returning to a checkpoint does.
	cut := offs[160]
	l, err := Open(filepath.Join(dir, "log"), KindMessage, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.TruncateTo(cut); err != nil {
		t.Fatal(err)
	}
	ki, err = OpenKeyIndex(l, filepath.Join(dir, "index"), payloadKeys)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ki.Close(); l.Close() })
	waitReady(t, ki)
	if _, err := os.Stat(ki.Path(l.Segments()[l.SegmentCount()-1].Base)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the active segment kept a sidecar")
	}
	for _, off := range lookupAll(t, l, ki, keyOf(1)) {
		if off >= cut {
			t.Fatalf("found %d, cut at %d", off, cut)
		}
	}
	more := writeKeyed(t, l, ki, 160, 100)
	if got, want := lookupAll(t, l, ki, keyOf(161)), wantOffsets(more, keyOf(161), 160); len(got) < len(want) || !slicesEqual(got[:len(want)], want) {
		t.Fatalf("%v, want prefix %v", got, want)
	}
}

// FuzzKeyIndexDecode: a sidecar of any bytes is refused or accepted, never
// a crash, and one accepted has a consistent fan-out.
func FuzzKeyIndexDecode(f *testing.F) {
	good := encodeKeyIndex(1000, 500, []indexEntry{{1, 8}, {0xff << 32, 16}})
	f.Add(good)
	f.Add(good[:100])
	f.Add([]byte("QMQX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fan, err := decodeKeyIndex(b, 1000, 500)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if int64(len(b)) != indexFileSize(fan[255]) {
			t.Fatal("accepted a sidecar of the wrong length")
		}
	})
}

// A directory in the index's directory is not a sidecar: it is left
// alone, and the index opens (it failed to, trying to remove it).
func TestKeyIndexOpensBesideADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "index", "lost+found", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	l, ki := openKeyed(t, dir, Options{})
	offs := writeKeyed(t, l, ki, 0, 3)
	if got := lookupAll(t, l, ki, keyOf(1)); !slicesEqual(got, wantOffsets(offs, keyOf(1), 0)) {
		t.Fatalf("lookup beside a directory: %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "index", "lost+found", "x")); err != nil {
		t.Fatalf("the directory went: %v", err)
	}
}

// A segment whose index cannot be rebuilt (its records do not read) is
// not "building" for ever: its lookups say why, and the others still
// answer until they reach it.
func TestKeyIndexFailedRebuildSaysSo(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1000}
	l, ki := openKeyed(t, dir, opts)
	writeKeyed(t, l, ki, 0, 200)
	waitReady(t, ki)
	segs := l.Segments()
	ki.Close()
	l.Close()
	os.Remove(ki.Path(segs[0].Base))
	b, err := os.ReadFile(segs[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // a record's bytes: its checksum fails
	if err := os.WriteFile(segs[0].Path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	l, ki = openKeyed(t, dir, opts)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = ki.Lookup(keyOf(1), func(int64) bool { return true })
		if !errors.Is(err, ErrIndexBuilding) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err == nil || errors.Is(err, ErrIndexBuilding) || !strings.Contains(err.Error(), "could not be rebuilt") {
		t.Fatalf("lookup through the damaged segment: %v", err)
	}
	if st := ki.Stats(); st.Failed != 1 {
		t.Fatalf("stats %+v, want one failed segment", st)
	}
}
