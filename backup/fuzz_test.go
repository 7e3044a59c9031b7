package backup

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzRead: Read refuses or accepts any bytes without panicking; what it
// refuses is a *CorruptError within the input, and what it accepts writes
// out exactly the header's Size bytes.
func FuzzRead(f *testing.F) {
	f.Add(sample(f, 3, 10))
	f.Add(sample(f, 0, 0))
	f.Add(sample(f, 1, 1))
	b := sample(f, 2, 5)
	f.Add(b[:len(b)-3])
	f.Add(magic[:])
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		h, err := Read(bytes.NewReader(in), &out)
		var ce *CorruptError
		switch {
		case err == nil:
			if int64(out.Len()) != h.Size {
				t.Fatalf("accepted with %d bytes out, the header says %d", out.Len(), h.Size)
			}
		case !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt):
			t.Fatalf("refused with %v, not a *CorruptError", err)
		case ce.Offset < 0 || ce.Offset > int64(len(in)):
			t.Fatalf("corrupt at byte %d of %d", ce.Offset, len(in))
		}
	})
}

// FuzzDecodeHeader: any header bytes are refused or decode to a header
// that encodes back to them.
func FuzzDecodeHeader(f *testing.F) {
	h := &Header{Kind: 1, Group: "g1", SnapshotID: "2-10-1", Index: 10, Term: 2, Configuration: []byte(`{}`), Size: 99}
	f.Add(h.encode()[12 : len(h.encode())-4])
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHeader(in)
		if err != nil {
			return
		}
		enc := h.encode()
		if !bytes.Equal(enc[12:len(enc)-4], in) {
			t.Fatalf("header %+v does not encode back to its bytes", h)
		}
	})
}
