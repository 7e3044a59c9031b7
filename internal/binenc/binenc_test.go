package binenc

import (
	"bytes"
	"errors"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	b := AppendString(nil, "subject")
	b = AppendBytes(b, []byte{1, 2, 3})
	b = AppendUint64(b, 1<<63+5)
	b = AppendUint32(b, 7)
	b = AppendUvarint(b, 300)
	b = append(b, 9)

	r := NewReader(b)
	if got := r.String(100); got != "subject" {
		t.Errorf("String = %q", got)
	}
	if got := r.Bytes(100); !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Errorf("Bytes = %v", got)
	}
	if got := r.Uint64(); got != 1<<63+5 {
		t.Errorf("Uint64 = %d", got)
	}
	if got := r.Uint32(); got != 7 {
		t.Errorf("Uint32 = %d", got)
	}
	if got := r.Count(1000); got != 300 {
		t.Errorf("Count = %d", got)
	}
	if got := r.Byte(); got != 9 {
		t.Errorf("Byte = %d", got)
	}
	if err := r.Done(); err != nil {
		t.Fatalf("Done: %v", err)
	}
}

func TestErrors(t *testing.T) {
	long := AppendString(nil, "abcdef")
	tests := []struct {
		name string
		read func(*Reader)
		in   []byte
		want error
	}{
		{"short uint64", func(r *Reader) { r.Uint64() }, []byte{1, 2, 3}, ErrShort},
		{"short uint32", func(r *Reader) { r.Uint32() }, []byte{1}, ErrShort},
		{"empty byte", func(r *Reader) { r.Byte() }, nil, ErrShort},
		{"bad uvarint", func(r *Reader) { r.Uvarint() }, []byte{0x80, 0x80}, ErrShort},
		{"overlong uvarint", func(r *Reader) { r.Uvarint() }, []byte{0x81, 0x00}, ErrNonCanonical},
		{"string over max", func(r *Reader) { r.String(3) }, long, ErrTooLong},
		{"string past input", func(r *Reader) { r.String(100) }, long[:4], ErrShort},
		{"count over max", func(r *Reader) { r.Count(2) }, AppendUvarint(nil, 3), ErrTooLong},
		{"length past input", func(r *Reader) { r.Bytes(1 << 30) }, AppendUvarint(nil, 1<<29), ErrShort},
		{"huge length", func(r *Reader) { r.Bytes(1 << 30) }, AppendUvarint(nil, 1<<62), ErrTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(tt.in)
			tt.read(r)
			if !errors.Is(r.Err(), tt.want) {
				t.Fatalf("err = %v, want %v", r.Err(), tt.want)
			}
			// After a failure every read is a zero value and the first error stays.
			if r.Byte() != 0 || r.Uint64() != 0 || r.String(10) != "" || !errors.Is(r.Err(), tt.want) {
				t.Fatalf("reads after failure not zero, or error changed to %v", r.Err())
			}
		})
	}
}

func TestDoneRejectsTrailingBytes(t *testing.T) {
	r := NewReader([]byte{1, 2})
	r.Byte()
	if r.Done() == nil {
		t.Fatal("Done accepted a trailing byte")
	}
}

// FuzzReader feeds arbitrary input to every read; it must never panic, and
// a length prefix must never make the reader return more than it was given.
func FuzzReader(f *testing.F) {
	f.Add(AppendString(AppendUint64(nil, 42), "hello"))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(in)
		for r.Err() == nil && r.Remaining() > 0 {
			p := r.Bytes(1 << 20)
			if len(p) > len(in) {
				t.Fatalf("Bytes returned %d bytes from %d", len(p), len(in))
			}
			r.Count(10)
			r.Uint32()
		}
		if r.Offset() > len(in) {
			t.Fatalf("offset %d past input of %d", r.Offset(), len(in))
		}
	})
}
