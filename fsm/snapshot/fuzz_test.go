package snapshot

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"testing"
)

// FuzzReadStream: reading a stream never panics, refuses with ErrBad, and
// asks to create only files whose paths the check accepted, each once, in
// the manifest's order and with its sizes. Each input is also tried with
// its manifest checksum recomputed, so that mutations reach the manifest
// decoder and the path checks. (fsm's FuzzCheckSnapPath checks that the
// state machine's check accepts only paths inside its directory.)
func FuzzReadStream(f *testing.F) {
	golden, _ := hex.DecodeString(goldenStream)
	f.Add(golden)
	f.Add(newTestData(f, 50).stream())
	f.Add(magic[:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		try := func(b []byte) {
			accepted := map[string]bool{}
			check := func(rel string) error {
				err := checkTestPath(rel)
				if err == nil {
					accepted[rel] = true
				}
				return err
			}
			var created []string
			var sizes []int64
			m, err := readStream(bytes.NewReader(b), check, func(rel string) (io.WriteCloser, error) {
				if !accepted[rel] {
					t.Fatalf("create(%q), a path the check did not accept", rel)
				}
				created = append(created, rel)
				sizes = append(sizes, 0)
				return &countWriter{n: &sizes[len(sizes)-1]}, nil
			})
			if err != nil {
				if m != nil || !errors.Is(err, ErrBad) {
					t.Fatalf("readStream = %v, %v; want nil and ErrBad", m, err)
				}
				return
			}
			if len(created) != len(m.Files) {
				t.Fatalf("%d files created, the manifest lists %d", len(created), len(m.Files))
			}
			for i, f := range m.Files {
				if created[i] != f.Rel || sizes[i] != f.Size {
					t.Fatalf("file %d: created %s with %d bytes, manifest says %s with %d", i, created[i], sizes[i], f.Rel, f.Size)
				}
			}
			if m.StreamSize() > int64(len(b)) {
				t.Fatalf("read a stream of %d bytes from %d", m.StreamSize(), len(b))
			}
		}
		try(b)
		if resealed, ok := resealManifest(b); ok {
			try(resealed)
		}
	})
}

type countWriter struct{ n *int64 }

func (w *countWriter) Write(p []byte) (int, error) { *w.n += int64(len(p)); return len(p), nil }
func (w *countWriter) Close() error                { return nil }

// resealManifest returns b with its manifest checksum recomputed, if b
// holds a whole manifest.
func resealManifest(b []byte) ([]byte, bool) {
	if len(b) < 12 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b[8:12]))
	if n > len(b)-16 {
		return nil, false
	}
	out := bytes.Clone(b)
	binary.LittleEndian.PutUint32(out[12+n:], crc32.Checksum(out[12:12+n], castagnoli))
	return out, true
}
