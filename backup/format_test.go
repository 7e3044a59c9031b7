package backup

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sample is a backup file of a snapshot in chunks of size bytes each.
func sample(t testing.TB, chunks, size int) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "b")
	h := &Header{Kind: 1, Group: "g1", SnapshotID: "2-10-1", Index: 10, Term: 2, Configuration: []byte(`{"Servers":[]}`), Size: int64(chunks * size)}
	w, err := Create(path, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range chunks {
		if err := w.Write(bytes.Repeat([]byte{byte('a' + i)}, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadNamesWhere: a file read whole gives back its stream; each kind
// of damage is refused naming the byte offset and the chunk it is in.
func TestReadNamesWhere(t *testing.T) {
	good := sample(t, 3, 100)
	var out bytes.Buffer
	h, err := Read(bytes.NewReader(good), &out)
	if err != nil || h.Group != "g1" || h.Index != 10 || out.String() != strings.Repeat("a", 100)+strings.Repeat("b", 100)+strings.Repeat("c", 100) {
		t.Fatalf("Read: %+v, %v, %d bytes", h, err, out.Len())
	}
	head := len(good) - 3*108 - 16 // the magic and the header
	for _, c := range []struct {
		name   string
		change func([]byte) []byte
		offset int64
		chunk  int
	}{
		{"a byte of chunk 2 flipped", func(b []byte) []byte { b[head+108+50] ^= 1; return b }, int64(head + 108 + 8), 2},
		{"chunk 3's length raised", func(b []byte) []byte {
			binary.LittleEndian.PutUint32(b[head+216:], 101)
			return b
		}, -1, 3},
		{"a header byte flipped", func(b []byte) []byte { b[14] ^= 1; return b }, 12, 0},
		{"the magic", func(b []byte) []byte { b[0] = 'X'; return b }, 0, 0},
		{"cut in chunk 1", func(b []byte) []byte { return b[:head+50] }, -1, 1},
		{"the trailer's checksum", func(b []byte) []byte { b[len(b)-2] ^= 1; return b }, int64(len(good) - 4), -1},
		{"the trailer's size", func(b []byte) []byte { b[len(b)-12] ^= 1; return b }, int64(len(good) - 12), -1},
		{"a chunk dropped", func(b []byte) []byte { return append(b[:head+108:head+108], b[head+216:]...) }, int64(len(good) - 108 - 16), -1},
		{"bytes after the trailer", func(b []byte) []byte { return append(b, 0) }, int64(len(good)), -1},
	} {
		_, err := Read(bytes.NewReader(c.change(append([]byte(nil), good...))), &bytes.Buffer{})
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Chunk != c.chunk || (c.offset >= 0 && ce.Offset != c.offset) {
			t.Errorf("%s: %v; want corrupt in chunk %d at byte %d", c.name, err, c.chunk, c.offset)
		}
	}
}

// TestResumeKeepsWholeChunks: a partial file cut in its third chunk
// resumes after its second, and finished is the file written at once.
func TestResumeKeepsWholeChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b")
	h := &Header{Kind: 2, Group: "meta", SnapshotID: "3-7-1", Index: 7, Term: 3, Size: 300}
	w, err := Create(path, h)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := w.Write(bytes.Repeat([]byte{byte('a' + i)}, 100)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	st, _ := os.Stat(path + PartialSuffix)
	if err := os.Truncate(path+PartialSuffix, st.Size()-30); err != nil {
		t.Fatal(err)
	}
	r, err := Resume(path)
	if err != nil {
		t.Fatal(err)
	}
	if r.Written() != 200 || r.Chunks() != 2 || r.Header().SnapshotID != "3-7-1" {
		t.Fatalf("resumed at %d bytes, %d chunks, %+v; want 200 after 2", r.Written(), r.Chunks(), r.Header())
	}
	if err := r.Write(bytes.Repeat([]byte{'c'}, 100)); err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if _, err := Read(f, &out); err != nil || out.Len() != 300 || out.String()[200:] != strings.Repeat("c", 100) {
		t.Fatalf("the resumed file: %v, %d bytes", err, out.Len())
	}
}
