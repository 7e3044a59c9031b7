// Package binenc holds the two small helpers every compact binary format in
// this module is written with: append-style encoders and a Reader that
// remembers its first error, so a decoder reads fields in a straight line and
// checks for failure once at the end.
//
// Strings and byte slices are length-prefixed with a uvarint; a Reader
// refuses any length larger than what remains, so a hostile length never
// allocates more than the input holds.
package binenc

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort means the input ended inside a field.
var ErrShort = errors.New("binenc: input too short")

// ErrTooLong means a length prefix exceeds the caller's limit.
var ErrTooLong = errors.New("binenc: field too long")

// AppendString appends a uvarint length and the bytes of s.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends a uvarint length and p.
func AppendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// AppendUvarint appends v as an unsigned varint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendUint64 appends v as 8 little-endian bytes.
func AppendUint64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }

// AppendUint32 appends v as 4 little-endian bytes.
func AppendUint32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }

// Reader decodes fields from a byte slice. After the first failure every
// further read returns a zero value and Err reports that failure.
type Reader struct {
	buf []byte
	off int
	err error
}

// NewReader returns a Reader over b.
func NewReader(b []byte) *Reader { return &Reader{buf: b} }

// Err returns the first error met, or nil.
func (r *Reader) Err() error { return r.err }

// Remaining returns the number of unread bytes.
func (r *Reader) Remaining() int { return len(r.buf) - r.off }

// Offset returns the number of bytes read so far.
func (r *Reader) Offset() int { return r.off }

// Since returns the bytes read from offset off (an earlier Offset) up to
// now. The result aliases the Reader's buffer.
func (r *Reader) Since(off int) []byte { return r.buf[off:r.off:r.off] }

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = fmt.Errorf("%w at byte %d", err, r.off)
	}
}

func (r *Reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf)-r.off {
		r.fail(ErrShort)
		return nil
	}
	p := r.buf[r.off : r.off+n]
	r.off += n
	return p
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	p := r.take(1)
	if p == nil {
		return 0
	}
	return p[0]
}

// Uint32 reads 4 little-endian bytes.
func (r *Reader) Uint32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(p)
}

// Uint64 reads 8 little-endian bytes.
func (r *Reader) Uint64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.LittleEndian.Uint64(p)
}

// Int64 reads 8 little-endian bytes as a signed integer.
func (r *Reader) Int64() int64 { return int64(r.Uint64()) }

// ErrNonCanonical means a varint was encoded in more bytes than needed:
// refusing it gives every value exactly one encoding.
var ErrNonCanonical = errors.New("binenc: non-canonical varint")

// Uvarint reads an unsigned varint in its shortest encoding.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.buf[r.off:])
	if n <= 0 {
		r.fail(ErrShort)
		return 0
	}
	if n > 1 && r.buf[r.off+n-1] == 0 {
		r.fail(ErrNonCanonical)
		return 0
	}
	r.off += n
	return v
}

// Count reads a uvarint element count and refuses one above max.
func (r *Reader) Count(max int) int {
	v := r.Uvarint()
	if r.err == nil && v > uint64(max) {
		r.fail(fmt.Errorf("%w: count %d above %d", ErrTooLong, v, max))
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte slice of at most max bytes. The result
// aliases the input.
func (r *Reader) Bytes(max int) []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(max) {
		r.fail(fmt.Errorf("%w: %d bytes above %d", ErrTooLong, n, max))
		return nil
	}
	return r.take(int(n))
}

// String reads a length-prefixed string of at most max bytes.
func (r *Reader) String(max int) string { return string(r.Bytes(max)) }

// Raw reads exactly n bytes. The result aliases the input.
func (r *Reader) Raw(n int) []byte { return r.take(n) }

// Done fails the Reader if any input is left unread: a decoder calls it last
// so that trailing garbage is an error, not silently ignored.
func (r *Reader) Done() error {
	if r.err == nil && r.off != len(r.buf) {
		r.fail(fmt.Errorf("binenc: %d trailing bytes", len(r.buf)-r.off))
	}
	return r.err
}
