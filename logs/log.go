package logs

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync/atomic"

	"github.com/qmqgo/qmq/internal/disk"
)

// Errors returned by every log. Callers test them with errors.Is; the
// wrapping message names the file and offset involved.
var (
	// ErrCorrupt means stored bytes failed a length, header or checksum check.
	ErrCorrupt = errors.New("logs: corrupt data")
	// ErrRetained means the offset was removed by retention (or lies before the log's start).
	ErrRetained = errors.New("logs: offset no longer retained")
	// ErrBeyondEnd means the offset is at or past the log's end.
	ErrBeyondEnd = errors.New("logs: offset beyond end of log")
	// ErrRecordSize means a payload is empty, too large, or not the log's fixed size.
	ErrRecordSize = errors.New("logs: bad record size")
	// ErrClosed means the log was closed.
	ErrClosed = errors.New("logs: log closed")
)

// Options configures a Log. The zero value of each field picks its default.
type Options struct {
	// SegmentSize is the most record bytes a segment holds before the log
	// rolls to a new one. Default 64 MiB.
	SegmentSize int64
	// MaxPayload is the largest payload Append accepts. Default 16 MiB.
	MaxPayload int
	// FixedPayload, when above zero, is the exact size of every payload; the
	// record at sequence n then starts at logical offset n*(8+FixedPayload).
	FixedPayload int
	// DurableEnd is the offset up to which the caller knows the log was made
	// durable (by Sync). On open, a bad record below it is an error naming
	// file and offset; one at or after it is a torn tail and is truncated.
	DurableEnd int64
	// Base is the offset of the first record when the log is created empty.
	Base int64
	// Files, when not nil, is the cache the log's segment files are opened
	// through, shared with the other logs of its store, so that their open
	// files stay within its bound. Default nil: every segment keeps its file
	// open for its life.
	Files *Files
}

func (o Options) withDefaults() Options {
	if o.SegmentSize <= 0 {
		o.SegmentSize = 64 << 20
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = 16 << 20
	}
	if o.FixedPayload > 0 {
		o.MaxPayload = o.FixedPayload
	}
	return o
}

// Log is an append-only sequence of checksummed records stored in segment
// files. One goroutine writes (Append, Flush, Sync, TruncateTo, Remove*);
// any number read concurrently (Read*, Scan, Start, End) without the
// writer's locks (with Options.Files, a read takes the cache's mutex once
// to get its file): readers see records up to the end published by the
// last Flush.
type Log struct {
	dir  string
	kind Kind
	opts Options

	segs atomic.Pointer[[]*segment] // copy-on-write; the last one is active
	end  atomic.Int64               // readers may read below this offset

	pending []byte // records appended but not yet written to the active segment
	werr    error  // sticky: after a failed write the log refuses writes
	// failed is a failure met outside the writer (a dirty file's fsync when
	// the cache evicted it); writeErr makes it werr.
	failed   atomic.Pointer[error]
	dirDirty bool // a segment was created or removed since the last Sync
	dirty    bool // the active segment was written since the last Sync
	closed   bool
	// writtenBack is the offset of the active segment up to which the
	// device was asked to write its pages (see Flush).
	writtenBack int64
}

// flushThreshold bounds the bytes buffered between Flushes.
const flushThreshold = 1 << 20

// writebackEvery is how many bytes Flush lets pile up in the page cache
// before it asks the device to start writing them: the fsync of a roll or
// a checkpoint, on the state machine's goroutine, then waits for little
// more than the last few, instead of for everything written since the
// last one (tens of megabytes and a hundred milliseconds, at full rate).
const writebackEvery = 1 << 20

// Open opens the log in dir, creating dir and a first segment if needed,
// and recovers its tail (see Options.DurableEnd).
func Open(dir string, kind Kind, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("logs: create %s: %w", dir, err)
	}
	l := &Log{dir: dir, kind: kind, opts: opts}
	segs, err := l.openSegments()
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		s, err := createSegment(l, l.opts.Base)
		if err != nil {
			return nil, err
		}
		segs = []*segment{s}
		l.dirDirty = true
	}
	l.segs.Store(&segs)
	l.end.Store(segs[len(segs)-1].end())
	return l, nil
}

func (l *Log) openSegments() ([]*segment, error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, fmt.Errorf("logs: list %s: %w", l.dir, err)
	}
	var bases []int64
	for _, e := range entries {
		if base, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			bases = append(bases, base)
		}
	}
	sort.Slice(bases, func(i, j int) bool { return bases[i] < bases[j] })
	var segs []*segment
	fail := func(err error) ([]*segment, error) {
		for _, s := range segs {
			s.detach()
		}
		return nil, err
	}
	for i, base := range bases {
		path := filepath.Join(l.dir, segmentName(base))
		last := i == len(bases)-1
		if last && l.opts.DurableEnd <= base && tornHeader(path, l.kind, base) {
			// Created by a roll (or the log's creation) that crashed before its
			// header reached the disk (the file short of a header, or its
			// header zeros or written in part): it never held a durable
			// record, and the next roll creates it again.
			if err := os.Remove(path); err != nil {
				return fail(fmt.Errorf("logs: remove torn segment: %w", err))
			}
			l.dirDirty = true
			if i == 0 {
				l.opts.Base = base
			}
			break
		}
		s, err := openSegment(l, path, base)
		if err != nil {
			return fail(err)
		}
		segs = append(segs, s)
		if i > 0 && segs[i-1].end() != base {
			return fail(fmt.Errorf("%w: %s ends at offset %d but the next segment starts at %d", ErrCorrupt, segs[i-1].path, segs[i-1].end(), base))
		}
	}
	if len(segs) > 0 {
		if err := l.recoverTail(segs[len(segs)-1]); err != nil {
			return fail(err)
		}
	}
	return segs, nil
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

// recoverTail scans the active segment and truncates it after its last
// valid record.
func (l *Log) recoverTail(s *segment) error {
	valid, bad, err := l.scanSegment(s, s.base, s.end(), nil)
	if err != nil {
		return err
	}
	if bad == nil {
		return nil
	}
	if valid < l.opts.DurableEnd {
		return fmt.Errorf("%w (below the durable end %d)", bad, l.opts.DurableEnd)
	}
	if err := s.truncate(valid - s.base); err != nil {
		return fmt.Errorf("logs: truncate torn tail of %s at offset %d: %w", s.path, valid, err)
	}
	s.size = valid - s.base
	l.dirty = true
	return nil
}

// scanSegment reads records of s from offset from up to offset to, calling
// fn for each valid one. It stops at the first invalid record and returns
// the offset where valid data ends, plus that record's problem in bad; err
// is only an I/O error or an error returned by fn.
func (l *Log) scanSegment(s *segment, from, to int64, fn func(int64, []byte) error) (valid int64, bad error, err error) {
	f, err := s.file(false)
	if err != nil {
		return from, nil, s.readErr(from, err)
	}
	defer s.done()
	// A buffer no larger than what is read: recovering the tail of a small
	// log (a schedule hour holding a few messages) must not cost 1 MiB.
	r := bufio.NewReaderSize(io.NewSectionReader(f, headerSize+from-s.base, to-from), int(min(max(to-from, 4096), 1<<20)))
	off := from
	var h [recordHeader]byte
	var buf []byte
	for off < to {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if !isEOF(err) {
				return off, nil, s.readErr(off, err)
			}
			return off, fmt.Errorf("%w: %s offset %d: record header truncated", ErrCorrupt, s.path, off), nil
		}
		n := int(binary.LittleEndian.Uint32(h[:4]))
		if n == 0 || n > l.opts.MaxPayload || (l.opts.FixedPayload > 0 && n != l.opts.FixedPayload) {
			return off, fmt.Errorf("%w: %s offset %d: record length %d", ErrCorrupt, s.path, off, n), nil
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			if !isEOF(err) {
				return off, nil, s.readErr(off, err)
			}
			return off, fmt.Errorf("%w: %s offset %d: record runs past end of file", ErrCorrupt, s.path, off), nil
		}
		if checksum(buf) != binary.LittleEndian.Uint32(h[4:]) {
			return off, fmt.Errorf("%w: %s offset %d: checksum mismatch", ErrCorrupt, s.path, off), nil
		}
		if fn != nil {
			if err := fn(off, buf); err != nil {
				return off, nil, err
			}
		}
		off += int64(recordHeader + n)
	}
	return off, nil, nil
}

// isEOF reports whether a read ended at the end of the data (a torn
// record) rather than failing.
func isEOF(err error) bool { return err == io.EOF || err == io.ErrUnexpectedEOF }

func (l *Log) segments() []*segment { return *l.segs.Load() }

func (l *Log) active() *segment {
	segs := l.segments()
	return segs[len(segs)-1]
}

// Start returns the offset of the first retained record.
func (l *Log) Start() int64 { return l.segments()[0].base }

// Next returns the offset the next Append will return: the end including
// records not yet flushed. Only the writer may call it.
func (l *Log) Next() int64 { return l.active().end() + int64(len(l.pending)) }

// End returns the offset just past the last record readers can see.
func (l *Log) End() int64 { return l.end.Load() }

// Dir returns the directory holding the log's segments.
func (l *Log) Dir() string { return l.dir }

// RecordSize returns the on-disk size of a record with a payload of n bytes.
func RecordSize(n int) int { return recordHeader + n }

// SetSegmentSize changes the size at which the log rolls to a new segment
// (n <= 0: the default), from the next Append on: that Append seals the
// active segment if the record would take it past n, at once if it holds
// more already. Segments sealed before keep their size. For a log of
// fixed-size records a size that is not a whole number of them rolls
// where its rounding down would. Writer only.
func (l *Log) SetSegmentSize(n int64) {
	l.opts.SegmentSize = Options{SegmentSize: n}.withDefaults().SegmentSize
}

// Append adds a record and returns its offset. The record becomes visible
// to readers at the next Flush (or Sync).
func (l *Log) Append(payload []byte) (int64, error) {
	if err := l.writeErr(); err != nil {
		return 0, err
	}
	if l.closed {
		return 0, ErrClosed
	}
	n := len(payload)
	if n == 0 || n > l.opts.MaxPayload || (l.opts.FixedPayload > 0 && n != l.opts.FixedPayload) {
		return 0, fmt.Errorf("%w: %d bytes", ErrRecordSize, n)
	}
	a := l.active()
	used := a.size + int64(len(l.pending))
	if used > 0 && used+int64(recordHeader+n) > l.opts.SegmentSize {
		if err := l.roll(); err != nil {
			return 0, err
		}
		a = l.active()
		used = 0
	}
	off := a.base + used
	l.pending = binary.LittleEndian.AppendUint32(l.pending, uint32(n))
	l.pending = binary.LittleEndian.AppendUint32(l.pending, checksum(payload))
	l.pending = append(l.pending, payload...)
	if len(l.pending) >= flushThreshold {
		if err := l.Flush(); err != nil {
			return 0, err
		}
	}
	return off, nil
}

// Flush writes buffered records to the active segment and makes them
// visible to readers. It does not fsync.
func (l *Log) Flush() error {
	if err := l.writeErr(); err != nil {
		return err
	}
	if len(l.pending) == 0 {
		return nil
	}
	a := l.active()
	if err := a.writeAt(l.pending, a.end()); err != nil {
		l.werr = fmt.Errorf("logs: write %s: %w", a.path, err)
		return l.werr
	}
	a.size += int64(len(l.pending))
	l.pending = l.pending[:0]
	l.dirty = true
	l.end.Store(a.end())
	if l.writtenBack < a.base {
		l.writtenBack = a.base // a new segment
	}
	if a.end()-l.writtenBack >= writebackEvery {
		a.writeback(l.writtenBack, a.end())
		l.writtenBack = a.end()
	}
	return nil
}

// roll seals the active segment (flushed and fsynced) and starts a new one.
func (l *Log) roll() error {
	if err := l.Flush(); err != nil {
		return err
	}
	a := l.active()
	if err := l.syncSegment(a); err != nil {
		return err
	}
	s, err := createSegment(l, a.end())
	if err != nil {
		l.werr = err
		return err
	}
	segs := append(append([]*segment(nil), l.segments()...), s)
	l.segs.Store(&segs)
	l.dirDirty = true
	return nil
}

// Sync flushes and fsyncs the active segment (sealed ones were fsynced when
// they were sealed), and the directory if segments were added or removed.
func (l *Log) Sync() error {
	if err := l.Flush(); err != nil {
		return err
	}
	if l.dirty {
		if err := l.syncSegment(l.active()); err != nil {
			return err
		}
		l.dirty = false
	}
	if l.dirDirty {
		if err := disk.SyncDir(l.dir); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		l.dirDirty = false
	}
	return nil
}

// syncSegment fsyncs s, a segment of l; a failure is sticky. It also
// reports a failed fsync of s's file by a cache that evicted it: that one
// may have consumed the error this one would have seen.
func (l *Log) syncSegment(s *segment) error {
	if err := s.sync(); err != nil {
		l.werr = fmt.Errorf("logs: sync %s: %w", s.path, err)
		return l.werr
	}
	return l.writeErr()
}

// writeErr returns the log's sticky write error, nil if it has none.
func (l *Log) writeErr() error {
	if l.werr == nil {
		if p := l.failed.Load(); p != nil {
			l.werr = *p
		}
	}
	return l.werr
}

// Failed returns a failure met outside the writer (see fail) that the
// writer may not have seen yet, or nil. Any goroutine may call it.
func (l *Log) Failed() error {
	if p := l.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail records a failure met outside the writer; the log's next Append,
// Flush or Sync returns it. Any goroutine may call it.
func (l *Log) fail(err error) {
	l.failed.CompareAndSwap(nil, &err)
}

// adopt gives s its file f, just opened (or, with created, created: its
// header is not yet fsynced); with a cache, the cache holds it from now on.
func (l *Log) adopt(s *segment, f *os.File, created bool) {
	if l.opts.Files == nil {
		s.f = f
		return
	}
	s.files = l.opts.Files
	s.files.insert(s, f, created)
}

// segmentFor returns the segment holding offset off, or nil.
func segmentFor(segs []*segment, off int64) *segment {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > off }) - 1
	if i < 0 {
		return nil
	}
	return segs[i]
}

func (l *Log) checkRange(off int64, size int) (*segment, error) {
	// Load the end before the segments: the writer publishes a new segment
	// before an end inside it, so these segments cover everything below end.
	end := l.End()
	segs := l.segments()
	if off < segs[0].base {
		return nil, fmt.Errorf("%w: offset %d is before the start %d", ErrRetained, off, segs[0].base)
	}
	if off >= end || (size > 0 && off+int64(size) > end) {
		return nil, fmt.Errorf("%w: offset %d, end %d", ErrBeyondEnd, off, end)
	}
	return segmentFor(segs, off), nil
}

// Read returns the payload of the record at offset off.
func (l *Log) Read(off int64) ([]byte, error) {
	s, err := l.checkRange(off, 0)
	if err != nil {
		return nil, err
	}
	return s.readRecord(off, 0, l.opts.MaxPayload)
}

// ReadSized returns the payload of the record at offset off whose whole
// size (RecordSize of its payload) the caller knows: one read, no more.
func (l *Log) ReadSized(off int64, size int) ([]byte, error) {
	if size <= recordHeader || size > recordHeader+l.opts.MaxPayload {
		return nil, fmt.Errorf("%w: record size %d at offset %d", ErrRecordSize, size, off)
	}
	s, err := l.checkRange(off, size)
	if err != nil {
		return nil, err
	}
	return s.readRecord(off, size, l.opts.MaxPayload)
}

// ReadRun returns the payloads of records lying back to back from offset
// off, whose whole sizes (RecordSize of each payload) are sizes, reading
// each segment they lie in once. The payloads share one buffer. Readers of
// many neighbouring records (a consumer's pull, a range of a consume log)
// use it instead of one read per record.
func (l *Log) ReadRun(off int64, sizes []int) ([][]byte, error) {
	total := 0
	for _, size := range sizes {
		if size <= recordHeader || size > recordHeader+l.opts.MaxPayload {
			return nil, fmt.Errorf("%w: record size %d at offset %d", ErrRecordSize, size, off+int64(total))
		}
		total += size
	}
	if len(sizes) == 0 {
		return nil, nil
	}
	if _, err := l.checkRange(off, total); err != nil {
		return nil, err
	}
	segs := l.segments()
	buf := make([]byte, total)
	out := make([][]byte, 0, len(sizes))
	for at, i := 0, 0; i < len(sizes); {
		pos := off + int64(at)
		s := segmentFor(segs, pos)
		if s == nil {
			return nil, fmt.Errorf("%w: offset %d is before the start", ErrRetained, pos)
		}
		// The records of this segment: a record never spans two.
		n, end := 0, at
		for i+n < len(sizes) && (s == segs[len(segs)-1] || off+int64(end) < nextBase(segs, s)) {
			end += sizes[i+n]
			n++
		}
		if err := s.readRun(pos, buf[at:end]); err != nil {
			return nil, err
		}
		for ; at < end; i++ {
			p, err := s.verify(off+int64(at), buf[at:at+sizes[i]])
			if err != nil {
				return nil, err
			}
			out = append(out, p)
			at += sizes[i]
		}
	}
	return out, nil
}

// nextBase returns the base of the segment after s in segs.
func nextBase(segs []*segment, s *segment) int64 {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > s.base })
	return segs[i].base
}

// Scan calls fn with each record from offset from up to the end visible
// when Scan starts. The payload passed to fn is only valid during the call.
// A bad record is returned as an error that names its file and offset.
func (l *Log) Scan(from int64, fn func(off int64, payload []byte) error) error {
	end := l.End() // before the segments: see checkRange
	segs := l.segments()
	if from < segs[0].base {
		return fmt.Errorf("%w: offset %d is before the start %d", ErrRetained, from, segs[0].base)
	}
	for i, s := range segs {
		segEnd := end
		if i+1 < len(segs) {
			segEnd = min(segs[i+1].base, end)
		}
		if from >= segEnd {
			continue
		}
		valid, bad, err := l.scanSegment(s, max(from, s.base), segEnd, fn)
		if err != nil {
			return err
		}
		if bad != nil {
			return bad
		}
		from = valid
	}
	return nil
}

// TruncateTo removes every record at or after offset end, which must be a
// record boundary between Start and End. Recovery uses it to return a log to
// a checkpoint; nothing else changes sealed data.
func (l *Log) TruncateTo(end int64) error {
	if err := l.Flush(); err != nil {
		return err
	}
	segs := l.segments()
	if end < segs[0].base || end > l.End() {
		return fmt.Errorf("logs: truncate %s to %d: outside [%d, %d]", l.dir, end, segs[0].base, l.End())
	}
	keep := sort.Search(len(segs), func(i int) bool { return segs[i].base > end }) // segs[:keep] stay
	if keep > 1 && segs[keep-1].base == end {
		keep-- // the segment starting exactly at end would be empty: drop it
	}
	if keep == len(segs) && end == segs[keep-1].end() {
		return nil // nothing to cut: the files stay as they are (and clean)
	}
	for _, s := range segs[keep:] {
		s.detach()
		if err := os.Remove(s.path); err != nil {
			l.werr = fmt.Errorf("logs: remove %s: %w", s.path, err)
			return l.werr
		}
	}
	last := segs[keep-1]
	if err := last.truncate(end - last.base); err != nil {
		l.werr = fmt.Errorf("logs: truncate %s: %w", last.path, err)
		return l.werr
	}
	last.size = end - last.base
	kept := append([]*segment(nil), segs[:keep]...)
	l.segs.Store(&kept)
	l.end.Store(end)
	l.dirty, l.dirDirty = true, true
	return nil
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	Base     int64  // offset of its first record
	Size     int64  // bytes of records it holds
	FileSize int64  // bytes of its file: header and records
	Path     string // its file
}

// Segments describes the log's segments, oldest first; the last is active.
// Only the writer may call it.
func (l *Log) Segments() []SegmentInfo {
	segs := l.segments()
	out := make([]SegmentInfo, len(segs))
	for i, s := range segs {
		out[i] = SegmentInfo{Base: s.base, Size: s.size, FileSize: headerSize + s.size, Path: s.path}
	}
	return out
}

// SegmentFiles describes the segment files of a closed log in dir holding
// records below end, without opening the log: each FileSize counts only
// the bytes below end, so a tail past it (torn, or written after end was
// recorded) is left out. Snapshots use it for logs they do not keep open.
func SegmentFiles(dir string, end int64) ([]SegmentInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("logs: list %s: %w", dir, err)
	}
	var out []SegmentInfo
	for _, e := range entries {
		base, ok := parseSegmentName(e.Name())
		if !ok || !e.Type().IsRegular() || (base >= end && base > 0) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("logs: %w", err)
		}
		size := min(st.Size()-headerSize, end-base)
		if size < 0 {
			return nil, fmt.Errorf("%w: %s is shorter than its header", ErrCorrupt, path)
		}
		out = append(out, SegmentInfo{Base: base, Size: size, FileSize: headerSize + size, Path: path})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Base < out[j].Base })
	if len(out) > 0 && end > 0 && out[len(out)-1].Base+out[len(out)-1].Size < end {
		return nil, fmt.Errorf("%w: %s holds records up to %d, not %d", ErrCorrupt, dir, out[len(out)-1].Base+out[len(out)-1].Size, end)
	}
	return out, nil
}

// RemoveBefore deletes the sealed segments that hold only records before
// offset off; the active segment is never removed. It returns how many it
// removed. Readers that still hold a removed segment get ErrRetained.
func (l *Log) RemoveBefore(off int64) (int, error) {
	segs := l.segments()
	n := removable(segs, off)
	if n == 0 {
		return 0, nil
	}
	kept := append([]*segment(nil), segs[n:]...)
	l.segs.Store(&kept)
	l.dirDirty = true
	for _, s := range segs[:n] {
		s.detach()
		if err := os.Remove(s.path); err != nil {
			return n, fmt.Errorf("logs: remove %s: %w", s.path, err)
		}
	}
	return n, nil
}

// KeptFrom returns the start RemoveBefore(off) would leave the log at:
// the base of the last segment starting at or before off, never past the
// active one's. Writer only.
func (l *Log) KeptFrom(off int64) int64 {
	segs := l.segments()
	return segs[removable(segs, off)].base
}

// removable counts the leading segments of segs RemoveBefore(off) removes.
func removable(segs []*segment, off int64) int {
	n := 0
	for n < len(segs)-1 && segs[n+1].base <= off {
		n++
	}
	return n
}

// Close flushes buffered records and closes every segment file. It does not
// fsync: call Sync first where durability matters.
func (l *Log) Close() error {
	if l.closed {
		return nil
	}
	err := l.Flush()
	l.closed = true
	for _, s := range l.segments() {
		if cerr := s.detach(); err == nil {
			err = cerr
		}
	}
	return err
}

// SegmentCount returns how many segments the log has (sealed and active).
func (l *Log) SegmentCount() int { return len(l.segments()) }
