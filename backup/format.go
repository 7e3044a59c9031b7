package backup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/transport"
)

// A backup file:
//
//	magic "QMQBACK1"
//	header-length u32 | header | crc32c(header) u32
//	chunks: length u32 (1 to MaxChunk) | crc32c(bytes) u32 | bytes
//	trailer: 0 u32 | size u64 | crc32c(every byte of the file before this) u32
//
// header: version 1 | kind byte | group | snapshot-id | index uvarint |
// term uvarint | configuration bytes | size uvarint (strings and bytes
// uvarint-prefixed; configuration is raft.Configuration as JSON). The
// chunks' bytes, in order, are the snapshot's stream, size bytes long.
// Integers are little-endian.
var magic = [8]byte{'Q', 'M', 'Q', 'B', 'A', 'C', 'K', '1'}

const (
	formatVersion = 1
	// MaxChunk bounds a chunk's bytes: what one answer of the leader carries.
	MaxChunk = transport.MaxBackupChunk
	// maxHeader bounds a header: names and a configuration.
	maxHeader = 2 << 20
	// maxSize bounds a snapshot's length, so that sums cannot overflow.
	maxSize = 1 << 60
)

// ErrCorrupt means a backup file is malformed or fails a checksum; the
// *CorruptError says where.
var ErrCorrupt = errors.New("backup: corrupt backup file")

// CorruptError is where a backup file is corrupt: the byte offset in the
// file, and the chunk (numbered from 1; 0 for the header, -1 for the
// trailer).
type CorruptError struct {
	Offset int64
	Chunk  int
	Why    string
}

func (e *CorruptError) Error() string {
	where := fmt.Sprintf("chunk %d", e.Chunk)
	switch e.Chunk {
	case 0:
		where = "header"
	case -1:
		where = "trailer"
	}
	return fmt.Sprintf("backup: corrupt backup file at byte %d (%s): %s", e.Offset, where, e.Why)
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Header says what snapshot a backup holds.
type Header struct {
	Kind          byte // transport.BackupBroker or BackupMeta
	Group         string
	SnapshotID    string
	Index, Term   uint64
	Configuration []byte // raft.Configuration as JSON
	Size          int64  // the snapshot stream's length
}

// KindName names a backup kind.
func KindName(kind byte) string {
	switch kind {
	case transport.BackupBroker:
		return "broker"
	case transport.BackupMeta:
		return "meta"
	}
	return fmt.Sprintf("kind(%d)", kind)
}

// headerOf is the header of the snapshot a chunk is of.
func headerOf(c *transport.BackupChunk) *Header {
	return &Header{Kind: c.Kind, Group: c.Group, SnapshotID: c.SnapshotID, Index: c.Index, Term: c.Term,
		Configuration: c.Configuration, Size: c.Size}
}

func (h *Header) encode() []byte {
	b := []byte{formatVersion, h.Kind}
	b = binenc.AppendString(b, h.Group)
	b = binenc.AppendString(b, h.SnapshotID)
	b = binenc.AppendUvarint(b, h.Index)
	b = binenc.AppendUvarint(b, h.Term)
	b = binenc.AppendBytes(b, h.Configuration)
	b = binenc.AppendUvarint(b, uint64(h.Size))
	out := append(magic[:], binary.LittleEndian.AppendUint32(nil, uint32(len(b)))...)
	out = append(out, b...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(b, castagnoli))
}

func decodeHeader(b []byte) (*Header, error) {
	r := binenc.NewReader(b)
	v := r.Byte()
	h := &Header{Kind: r.Byte(), Group: r.String(256), SnapshotID: r.String(256), Index: r.Uvarint(), Term: r.Uvarint(),
		Configuration: r.Bytes(maxHeader)}
	size := r.Uvarint()
	if err := r.Done(); err != nil {
		return nil, err
	}
	switch {
	case v != formatVersion:
		return nil, fmt.Errorf("format version %d, this build reads %d", v, formatVersion)
	case h.Kind != transport.BackupBroker && h.Kind != transport.BackupMeta:
		return nil, fmt.Errorf("kind %d", h.Kind)
	case h.Group == "" || h.SnapshotID == "":
		return nil, fmt.Errorf("no group or snapshot id")
	case size > maxSize:
		return nil, fmt.Errorf("snapshot of %d bytes", size)
	}
	h.Size = int64(size)
	return h, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// reader reads a backup file, counting its bytes and summing them.
type reader struct {
	r   io.Reader
	off int64
	crc uint32 // of the bytes read
}

func (r *reader) full(b []byte) error {
	n, err := io.ReadFull(r.r, b)
	r.crc = crc32.Update(r.crc, castagnoli, b[:n])
	r.off += int64(n)
	return err
}

// Read reads a backup file from r to its end, checking every checksum,
// and writes the snapshot's stream to w (io.Discard to verify only).
// A file that is not whole or fails a check is refused with a
// *CorruptError naming where; w's errors come back as they are. What was
// written to w must be discarded unless Read returns nil.
func Read(r io.Reader, w io.Writer) (*Header, error) {
	rd := &reader{r: r}
	h, err := rd.header()
	if err != nil {
		return nil, err
	}
	var n int64
	for chunk := 1; ; chunk++ {
		at := rd.off
		b, err := rd.chunk(chunk)
		if err != nil {
			return nil, err
		}
		if b == nil {
			if n != h.Size {
				return nil, &CorruptError{at, -1, fmt.Sprintf("the chunks hold %d bytes, the header says %d", n, h.Size)}
			}
			break
		}
		if n += int64(len(b)); n > h.Size {
			return nil, &CorruptError{at, chunk, fmt.Sprintf("the chunks hold more than the header's %d bytes", h.Size)}
		}
		if _, err := w.Write(b); err != nil {
			return nil, err
		}
	}
	if err := rd.trailer(h.Size); err != nil {
		return nil, err
	}
	return h, nil
}

// header reads the magic and the header.
func (rd *reader) header() (*Header, error) {
	var head [len(magic) + 4]byte
	if err := rd.full(head[:]); err != nil {
		return nil, &CorruptError{0, 0, fmt.Sprintf("not a backup file: %v", err)}
	}
	if [8]byte(head[:8]) != magic {
		return nil, &CorruptError{0, 0, fmt.Sprintf("not a backup file: magic %q", head[:8])}
	}
	n := binary.LittleEndian.Uint32(head[8:])
	if n > maxHeader {
		return nil, &CorruptError{8, 0, fmt.Sprintf("header of %d bytes", n)}
	}
	b := make([]byte, n+4)
	if err := rd.full(b); err != nil {
		return nil, &CorruptError{rd.off, 0, fmt.Sprintf("cut short: %v", err)}
	}
	if crc32.Checksum(b[:n], castagnoli) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, &CorruptError{int64(len(head)), 0, "checksum mismatch"}
	}
	h, err := decodeHeader(b[:n])
	if err != nil {
		return nil, &CorruptError{int64(len(head)), 0, err.Error()}
	}
	return h, nil
}

// chunk reads the next chunk's bytes, or nil at the trailer's mark.
func (rd *reader) chunk(chunk int) ([]byte, error) {
	at := rd.off
	var head [8]byte
	if err := rd.full(head[:4]); err != nil {
		return nil, &CorruptError{at, chunk, fmt.Sprintf("cut short (no trailer): %v", err)}
	}
	n := binary.LittleEndian.Uint32(head[:4])
	if n == 0 {
		return nil, nil
	}
	if n > MaxChunk {
		return nil, &CorruptError{at, chunk, fmt.Sprintf("length %d above %d", n, MaxChunk)}
	}
	if err := rd.full(head[4:]); err != nil {
		return nil, &CorruptError{rd.off, chunk, fmt.Sprintf("cut short: %v", err)}
	}
	b := make([]byte, n)
	if err := rd.full(b); err != nil {
		return nil, &CorruptError{rd.off, chunk, fmt.Sprintf("cut short: %v", err)}
	}
	if crc32.Checksum(b, castagnoli) != binary.LittleEndian.Uint32(head[4:]) {
		return nil, &CorruptError{at + 8, chunk, fmt.Sprintf("checksum mismatch in its %d bytes", n)}
	}
	return b, nil
}

// trailer reads the rest of the trailer, after its mark, and checks that
// the file ends there.
func (rd *reader) trailer(size int64) error {
	at := rd.off - 4
	var b [8]byte
	if err := rd.full(b[:]); err != nil {
		return &CorruptError{at, -1, fmt.Sprintf("cut short: %v", err)}
	}
	if got := binary.LittleEndian.Uint64(b[:]); got != uint64(size) {
		return &CorruptError{at + 4, -1, fmt.Sprintf("size %d, the header says %d", got, size)}
	}
	want := rd.crc
	var s [4]byte
	if err := rd.full(s[:]); err != nil {
		return &CorruptError{rd.off, -1, fmt.Sprintf("cut short: %v", err)}
	}
	if binary.LittleEndian.Uint32(s[:]) != want {
		return &CorruptError{at + 12, -1, "checksum of the file mismatch"}
	}
	var one [1]byte
	if n, _ := io.ReadFull(rd.r, one[:]); n > 0 {
		return &CorruptError{rd.off, -1, "bytes after the trailer"}
	}
	return nil
}
