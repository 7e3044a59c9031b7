package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// goldenManifest and goldenFiles are a snapshot whose stream is
// goldenStream: the format every release reads.
var (
	goldenManifest = &Manifest{Checkpoint: []byte("ckpt"), Files: []File{
		{Rel: "messages/0.seg", Size: 3},
		{Rel: "consume/s/1.seg", Size: 0},
	}}
	goldenFiles  = map[string]string{"messages/0.seg": "abcdef", "consume/s/1.seg": ""}
	goldenStream = "514d51534e415031" + // magic "QMQSNAP1"
		"27000000" + // manifest length
		"04636b7074" + // checkpoint
		"02" + "0e6d657373616765732f302e736567" + "03" + "0f636f6e73756d652f732f312e736567" + "00" + // files
		"76bb5171" + // crc32c(manifest)
		"616263" + "b73f4b36" + // messages/0.seg's first 3 bytes, their crc32c
		"00000000" // consume/s/1.seg: no bytes
)

func openGolden(rel string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(goldenFiles[rel])), nil
}

// captureFiles returns a create function keeping what it is given in got.
func captureFiles(got map[string]string) func(string) (io.WriteCloser, error) {
	return func(rel string) (io.WriteCloser, error) {
		return &captureWriter{rel: rel, into: got}, nil
	}
}

type captureWriter struct {
	bytes.Buffer
	rel  string
	into map[string]string
}

func (w *captureWriter) Close() error { w.into[w.rel] = w.String(); return nil }

// A stream is written, and read, byte for byte as it always was.
func TestStreamFormat(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, goldenManifest, openGolden); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(b.Bytes()); got != goldenStream {
		t.Fatalf("stream\n%s\nwant\n%s", got, goldenStream)
	}
	if n := goldenManifest.StreamSize(); n != int64(b.Len()) {
		t.Fatalf("StreamSize %d, the stream has %d bytes", n, b.Len())
	}
	if n := goldenManifest.FilesSize(); n != 3 {
		t.Fatalf("FilesSize %d, want 3", n)
	}
	stream, _ := hex.DecodeString(goldenStream)
	got := map[string]string{}
	m, err := readStream(bytes.NewReader(stream), checkTestPath, captureFiles(got))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, goldenManifest) {
		t.Fatalf("read manifest %+v, want %+v", m, goldenManifest)
	}
	if want := map[string]string{"messages/0.seg": "abc", "consume/s/1.seg": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("read files %q, want %q", got, want)
	}
}

// Any one bit changed, anywhere in a stream, fails the read with ErrBad.
func TestStreamRefusesEveryBitFlip(t *testing.T) {
	stream, _ := hex.DecodeString(goldenStream)
	for at := range stream {
		for bit := range 8 {
			b := bytes.Clone(stream)
			b[at] ^= 1 << bit
			m, err := readStream(bytes.NewReader(b), checkTestPath, captureFiles(map[string]string{}))
			if !errors.Is(err, ErrBad) || m != nil {
				t.Fatalf("byte %d bit %d flipped: %v, %v; want ErrBad", at, bit, m, err)
			}
		}
	}
	for n := range len(stream) {
		if _, err := readStream(bytes.NewReader(stream[:n]), checkTestPath, captureFiles(map[string]string{})); !errors.Is(err, ErrBad) {
			t.Fatalf("the stream cut at %d bytes: %v, want ErrBad", n, err)
		}
	}
}

// ReadHead refuses a path its check refuses, with ErrBad even when the
// check's error does not say so, and ReadFiles never sees it.
func TestReadHeadChecksPaths(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, goldenManifest, openGolden); err != nil {
		t.Fatal(err)
	}
	errNo := errors.New("not here")
	var checked []string
	_, err := ReadHead(bytes.NewReader(b.Bytes()), func(rel string) error {
		checked = append(checked, rel)
		if strings.HasPrefix(rel, "consume/") {
			return errNo
		}
		return nil
	})
	if !errors.Is(err, ErrBad) || !errors.Is(err, errNo) || !strings.Contains(err.Error(), "consume/s/1.seg") {
		t.Fatalf("ReadHead with a check refusing a path: %v, want ErrBad and the check's error, naming the path", err)
	}
	if want := []string{"messages/0.seg", "consume/s/1.seg"}; !reflect.DeepEqual(checked, want) {
		t.Fatalf("checked %v, want %v", checked, want)
	}
}

// The sizes a manifest lists add up to at most maxBytes, so that the space
// checks' sums cannot overflow.
func TestManifestBoundsTotalSize(t *testing.T) {
	for _, tc := range []struct {
		last int64
		ok   bool
	}{
		{5, true},
		{4, true},
		{6, false},
	} {
		m := &Manifest{Checkpoint: []byte("x"), Files: []File{
			{Rel: "messages/a.seg", Size: maxBytes - 5},
			{Rel: "messages/b.seg", Size: tc.last},
		}}
		got, err := decodeManifest(m.encode(), checkTestPath)
		if !tc.ok {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("a manifest of %d bytes: %v, want ErrBad", maxBytes-5+tc.last, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("a manifest of %d bytes: %v", maxBytes-5+tc.last, err)
		}
		if size := got.StreamSize(); size < got.FilesSize() || 2*size+SpaceReserve < 0 {
			t.Fatalf("stream size %d overflows", size)
		}
	}
	// Sizes that would wrap around int64 together.
	m := &Manifest{Checkpoint: []byte("x")}
	for i := range 4 {
		m.Files = append(m.Files, File{Rel: fmt.Sprintf("messages/%d.seg", i), Size: 1 << 62})
	}
	if _, err := decodeManifest(m.encode(), checkTestPath); !errors.Is(err, ErrBad) {
		t.Fatalf("a manifest of 2^64 bytes: %v, want ErrBad", err)
	}
}

func TestReadStreamAllocatesWhatArrives(t *testing.T) {
	// A header claiming the largest manifest, followed by a few bytes: the
	// reader must fail without allocating what the header claims.
	head := append(magic[:], 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(head[8:], maxManifest)
	head = append(head, "short"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ReadHead(bytes.NewReader(head), checkTestPath)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrBad) {
		t.Fatalf("ReadHead: %v, want ErrBad", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Fatalf("reading a %d-byte stream allocated %d bytes", len(head), n)
	}
}
