package logs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/qmqgo/qmq/internal/disk"
)

// A segment file is a fixed header followed by records:
//
//	header (16 bytes)
//	+-------+---------+------+----------+-----------------+
//	| magic | version | kind | reserved | base offset     |
//	| "QMQL"| u8 = 1  | u8   | u16 = 0  | u64 LE          |
//	+-------+---------+------+----------+-----------------+
//	record (8 + len bytes), repeated
//	+--------+------------------+-----------+
//	| len    | crc32c(payload)  | payload   |
//	| u32 LE | u32 LE           | len bytes |
//	+--------+------------------+-----------+
//
// The base offset is the logical offset of the segment's first record; a
// record's logical offset is base + its position after the header. Files are
// named by base offset (20 decimal digits) so that a directory listing sorts
// them. A record's len is never 0, so a run of zero bytes (a preallocated or
// torn tail) never parses as a valid record.
const (
	headerSize   = 16
	recordHeader = 8
	version      = 1
	fileSuffix   = ".seg"
)

var magic = [4]byte{'Q', 'M', 'Q', 'L'}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// checksum returns the CRC32C of p.
func checksum(p []byte) uint32 { return crc32.Checksum(p, crcTable) }

// Kind says which typed log a segment belongs to; it is written into every
// segment header so that a file moved into the wrong directory is refused.
type Kind uint8

// Kinds of log. The values are written to disk: never renumber them.
const (
	KindMessage  Kind = 1
	KindConsume  Kind = 2
	KindPull     Kind = 3
	KindSchedule Kind = 4 // delaywheel: delayed messages of one hour of delivery time
	KindDispatch Kind = 5 // delaywheel: which of an hour's entries were fired
	KindJournal  Kind = 6 // delaywheel: delayed appends by time, for the dedup window
	KindTimeline Kind = 7 // fsm: what commands did to messages, for their timelines
)

func segmentName(base int64) string { return fmt.Sprintf("%020d%s", base, fileSuffix) }

func parseSegmentName(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, fileSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(digits, 10, 64)
	return base, err == nil && base >= 0
}

func encodeHeader(kind Kind, base int64) []byte {
	h := make([]byte, headerSize)
	copy(h, magic[:])
	h[4] = version
	h[5] = byte(kind)
	binary.LittleEndian.PutUint64(h[8:], uint64(base))
	return h
}

// segment is one file of a log. Its base and path are fixed once it is
// opened; size is only changed by the log's single writer.
//
// Without a cache (Options.Files nil) f is open for the segment's life.
// With one, f and the fields after it belong to the cache: f is nil while
// the file is not cached, and every use goes through file and done.
type segment struct {
	base int64 // logical offset of the first record
	path string
	size int64 // bytes of records (file size minus header) that are valid

	f     *os.File
	files *Files // nil: no cache
	owner *Log   // takes the sticky error of a failed eviction fsync

	refs    atomic.Int32 // users of f: it is not closed while above zero
	removed atomic.Bool  // removed, or its log closed: never handed out again
	syncMu  sync.Mutex   // serialises fsyncs of f (the writer's and evictions')
	// Guarded by files.mu:
	dirty      bool   // written since its last fsync
	gen        uint64 // writes begun, to tell whether one came during an eviction's fsync
	list       *lru   // files.clean or files.dirty while cached, else nil
	prev, next *segment
}

// file returns the segment's file for a read or, with write, for the
// writer to change it; the caller calls done when finished with it. A
// segment removed meanwhile gives errRemoved.
func (s *segment) file(write bool) (*os.File, error) {
	if s.files == nil {
		return s.f, nil
	}
	return s.files.acquire(s, write)
}

// done ends a use begun by file.
func (s *segment) done() {
	if s.files != nil {
		s.files.release(s)
	}
}

// sync fsyncs the segment's file.
func (s *segment) sync() error {
	f, err := s.file(false)
	if err != nil {
		return err
	}
	defer s.done()
	if s.files == nil {
		return f.Sync()
	}
	return s.files.sync(s, f)
}

// truncate cuts the segment's file to hold size bytes of records.
func (s *segment) truncate(size int64) error {
	f, err := s.file(true)
	if err != nil {
		return err
	}
	defer s.done()
	return f.Truncate(headerSize + size)
}

// writeAt writes p at logical offset off.
func (s *segment) writeAt(p []byte, off int64) error {
	f, err := s.file(true)
	if err != nil {
		return err
	}
	defer s.done()
	_, err = f.WriteAt(p, headerSize+off-s.base)
	return err
}

// writeback asks the device to start writing the records between logical
// offsets from and to (see disk.Writeback).
func (s *segment) writeback(from, to int64) {
	f, err := s.file(false)
	if err != nil {
		return // a hint only: the next fsync meets the failure
	}
	defer s.done()
	disk.Writeback(f, headerSize+from-s.base, to-from)
}

// detach closes the segment's file; with a cache, it stops handing the
// file out and it is closed once its last user is done.
func (s *segment) detach() error {
	if s.files == nil {
		return s.f.Close()
	}
	return s.files.forget(s)
}

// end returns the logical offset just past the segment's last record.
func (s *segment) end() int64 { return s.base + s.size }

// createSegment creates the segment of log l starting at base.
func createSegment(l *Log, base int64) (*segment, error) {
	dir, kind := l.dir, l.kind
	path := filepath.Join(dir, segmentName(base))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("logs: create segment: %w", err)
	}
	if _, err := f.Write(encodeHeader(kind, base)); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("logs: write segment header %s: %w", path, err)
	}
	s := &segment{base: base, path: path, owner: l}
	l.adopt(s, f, true)
	return s, nil
}

// tornHeader reports whether the segment file at path lacks a whole
// header because its creation crashed: it is shorter than a header, or
// its header's bytes are each either the right one (for kind and base) or
// zero, and not all right. A file system may keep a new file's size but
// not the data written into it, so a crashed creation can leave zeros
// where the header should be; any other header, and one that cannot be
// read, is not torn (openSegment then says what is wrong with it).
func tornHeader(path string, kind Kind, base int64) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	h := make([]byte, headerSize)
	n, err := io.ReadFull(f, h)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false
	}
	if n < headerSize {
		return true
	}
	want := encodeHeader(kind, base)
	whole := true
	for i := range h {
		if h[i] != want[i] {
			if h[i] != 0 {
				return false
			}
			whole = false
		}
	}
	return !whole
}

// openSegment opens an existing segment of log l and checks its header;
// with a cache the file may be closed again as soon as it is checked.
func openSegment(l *Log, path string, base int64) (*segment, error) {
	kind := l.kind
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("logs: open segment: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("logs: stat segment: %w", err)
	}
	h := make([]byte, headerSize)
	if _, err := f.ReadAt(h, 0); err != nil {
		f.Close()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: %s: header truncated (%d bytes)", ErrCorrupt, path, st.Size())
		}
		return nil, fmt.Errorf("logs: read segment header %s: %w", path, err)
	}
	switch {
	case [4]byte(h[:4]) != magic:
		err = fmt.Errorf("%w: %s: bad magic %q", ErrCorrupt, path, h[:4])
	case h[4] != version:
		err = fmt.Errorf("%w: %s: unsupported version %d", ErrCorrupt, path, h[4])
	case Kind(h[5]) != kind:
		err = fmt.Errorf("%w: %s: segment of kind %d in a log of kind %d", ErrCorrupt, path, h[5], kind)
	case int64(binary.LittleEndian.Uint64(h[8:])) != base:
		err = fmt.Errorf("%w: %s: header base %d does not match its name", ErrCorrupt, path, binary.LittleEndian.Uint64(h[8:]))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &segment{base: base, path: path, size: st.Size() - headerSize, owner: l}
	l.adopt(s, f, false)
	return s, nil
}

// readRecord reads the record at logical offset off, whose whole size
// (header included) the caller may know; with size 0 it reads the header
// first. It verifies length and checksum and returns the payload.
func (s *segment) readRecord(off int64, size int, maxPayload int) ([]byte, error) {
	f, err := s.file(false)
	if err != nil {
		return nil, s.readErr(off, err)
	}
	defer s.done()
	pos := off - s.base + headerSize
	if size == 0 {
		var h [recordHeader]byte
		if _, err := f.ReadAt(h[:], pos); err != nil {
			return nil, s.readErr(off, err)
		}
		n := binary.LittleEndian.Uint32(h[:4])
		if n == 0 || int64(n) > int64(maxPayload) {
			return nil, fmt.Errorf("%w: %s offset %d: record length %d", ErrCorrupt, s.path, off, n)
		}
		size = recordHeader + int(n)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, pos); err != nil {
		return nil, s.readErr(off, err)
	}
	return s.verify(off, buf)
}

// readRun fills buf with the bytes of records from logical offset off.
func (s *segment) readRun(off int64, buf []byte) error {
	f, err := s.file(false)
	if err != nil {
		return s.readErr(off, err)
	}
	defer s.done()
	if _, err := f.ReadAt(buf, off-s.base+headerSize); err != nil {
		return s.readErr(off, err)
	}
	return nil
}

func (s *segment) readErr(off int64, err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s offset %d: record runs past end of file", ErrCorrupt, s.path, off)
	}
	// Without a cache a removed segment's file is closed under its readers;
	// with one, a file is never closed while in use, so a closed file there
	// is a fault to report as such, not retention.
	if errors.Is(err, errRemoved) || (s.files == nil && errors.Is(err, os.ErrClosed)) {
		return fmt.Errorf("%w: offset %d", ErrRetained, off)
	}
	return fmt.Errorf("logs: read %s offset %d: %w", s.path, off, err)
}

// verify checks one whole record (header and payload) read at off.
func (s *segment) verify(off int64, rec []byte) ([]byte, error) {
	n := binary.LittleEndian.Uint32(rec[:4])
	if n == 0 || int(n) != len(rec)-recordHeader {
		return nil, fmt.Errorf("%w: %s offset %d: record length %d, expected %d", ErrCorrupt, s.path, off, n, len(rec)-recordHeader)
	}
	payload := rec[recordHeader:]
	if checksum(payload) != binary.LittleEndian.Uint32(rec[4:8]) {
		return nil, fmt.Errorf("%w: %s offset %d: checksum mismatch", ErrCorrupt, s.path, off)
	}
	return payload, nil
}
