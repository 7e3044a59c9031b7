package delaywheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// HourMillis is one hour of delivery time, the schedule log's unit.
const HourMillis = int64(time.Hour / time.Millisecond)

// Hour returns the hour number (hours since the Unix epoch) of a due time.
func Hour(at int64) int64 { return (at - floorMod(at, HourMillis)) / HourMillis }

// HourName names an hour's directory by its UTC date and hour, 2026113014.
func HourName(hour int64) string {
	return time.UnixMilli(hour * HourMillis).UTC().Format("2006010215")
}

// Refs pack an hour and an offset into that hour's records: 20 bits of
// hour (about 120 years of hours from the epoch, enough for anything due
// within two years of now) and 44 bits of offset (16 TiB per hour).
const (
	refOffsetBits = 44
	maxRefOffset  = 1<<refOffsetBits - 1
	maxRefHour    = 1<<(64-refOffsetBits) - 1
)

// MakeRef returns the reference of the record at off in hour's records.
func MakeRef(hour, off int64) uint64 { return uint64(hour)<<refOffsetBits | uint64(off) }

// SplitRef returns a reference's hour and offset.
func SplitRef(ref uint64) (hour, off int64) {
	return int64(ref >> refOffsetBits), int64(ref & maxRefOffset)
}

// Schedule is a broker group's schedule log. Each hour of delivery time has
// a directory of its own holding two logs: the records (each the whole
// message and its due time), whose segments lie in the hour's directory,
// and in its subdirectory dispatched/ the dispatch log (the offset of each
// record fired), created at the hour's first fire. Only hours in use are open, at
// most maxOpen at once, so the thousands of hours two years hold cost
// nothing until they are near.
//
// One goroutine writes (the state machine's apply); Load and Read may run
// on others. A mutex guards which hours are open; the logs themselves are
// read without locks below their flushed ends.
//
// Closing an hour does not fsync it: like the state machine's other logs,
// the schedule must be durable only at a checkpoint (Raft replays what came
// after), and Sync makes every hour written since the last one durable at
// once. Messages due at random times up to two years ahead each touch a
// different hour, so an fsync per close would cost an fsync per message.
type Schedule struct {
	dir     string
	maxOpen int
	files   *logs.Files // the cache the hours' segment files are opened through; nil for none
	// dirFile is the schedule directory, open from OpenSchedule to Close:
	// Sync's syncfs(2) goes through it. A write-back error is reported to a
	// descriptor of the file system only if it happened after that
	// descriptor was opened, so one opened afresh at each checkpoint would
	// miss an error from before it (a closed hour's pages written back
	// since the last checkpoint), and the checkpoint would call lost data
	// durable. One descriptor open for the schedule's life sees them all.
	dirFile *os.File
	// syncfs says Sync may trust one syncfs(2) (syncfsTrusted), asked once
	// when the schedule opens: the kernel does not change under it.
	syncfs bool

	mu      sync.Mutex
	open    map[int64]*hourLog
	closed  map[int64]*closedHour // every hour known and not open
	clock   uint64                // use counter, for closing the least recently used hour
	written map[int64]bool        // hours created or written since the last Sync
	// closeErr is a failure to close an hour (a write of its buffered
	// records, or a failure its log met before, such as a file cache's
	// fsync evicting it): sticky, reported by Flush, Failed, Sync and
	// Close.
	closeErr error
}

// HourEnds is where an hour's two logs end.
type HourEnds struct{ Records, Dispatched int64 }

type hourLog struct {
	records    *logs.Log
	dispatched *logs.Log // nil until the hour's first dispatch
	used       uint64
	pins       int // loads reading it without the lock: not closed meanwhile
}

func (h *hourLog) ends() HourEnds {
	e := HourEnds{Records: h.records.End()}
	if h.dispatched != nil {
		e.Dispatched = h.dispatched.End()
	}
	return e
}

// closedHour is an hour not open: where its logs end, whether it still
// needs cutting back to them (not opened since OpenSchedule), and its files
// once a snapshot listed them (they do not change while it is closed).
type closedHour struct {
	ends  HourEnds
	fresh bool
	files []logs.SegmentInfo
	// dispatched says the hour has a dispatch log; fresh hours may have
	// one past the checkpoint's ends, so they look.
	dispatched bool
}

// DispatchRecordSize is a dispatch record's size, its header and an
// 8-byte offset: a dispatch log ends at a multiple of it.
const DispatchRecordSize = 16

// ErrBusy means an hour is being read and cannot be removed now.
var ErrBusy = errors.New("delaywheel: hour in use")

// ErrHourFull means an hour's records reach the largest offset a reference
// can name (16 TiB): nothing more can be scheduled in that hour.
var ErrHourFull = errors.New("delaywheel: schedule hour full")

// OpenSchedule opens the schedule log in dir, creating it. known names
// every hour the caller's checkpoint holds, with where its logs ended then:
// those hours are cut back to those ends when first opened, and every other
// hour directory (created after the checkpoint, or emptied before it) is
// removed now, with one listing of dir. No hour is opened until used;
// maxOpen (at least 2) bounds the hours open at once. The hours' logs open
// their segment files through files (nil: each its own, for its life).
// The schedule keeps one descriptor of dir open until Close.
func OpenSchedule(dir string, maxOpen int, known map[int64]HourEnds, files *logs.Files) (*Schedule, error) {
	if maxOpen < 2 {
		return nil, fmt.Errorf("delaywheel: at least 2 open hours, not %d", maxOpen)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delaywheel: create schedule directory: %w", err)
	}
	// Opened before anything is written, so that Sync sees every write-back
	// error from here on (see Schedule.dirFile).
	dirFile, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("delaywheel: open schedule directory: %w", err)
	}
	s := &Schedule{dir: dir, maxOpen: maxOpen, files: files, dirFile: dirFile, syncfs: syncfsTrusted(),
		open: map[int64]*hourLog{}, closed: map[int64]*closedHour{}, written: map[int64]bool{}}
	for hour, e := range known {
		s.closed[hour] = &closedHour{ends: e, fresh: true}
	}
	entries, err := dirFile.ReadDir(-1)
	if err != nil {
		dirFile.Close()
		return nil, fmt.Errorf("delaywheel: list schedule: %w", err)
	}
	for _, e := range entries {
		if hour, ok := parseHourName(e.Name()); ok && s.closed[hour] == nil {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				dirFile.Close()
				return nil, fmt.Errorf("delaywheel: remove hour %s: %w", e.Name(), err)
			}
		}
	}
	return s, nil
}

func parseHourName(name string) (int64, bool) {
	t, err := time.Parse("2006010215", name)
	if err != nil || len(name) != 10 {
		return 0, false
	}
	return t.UnixMilli() / HourMillis, true
}

func (s *Schedule) hourDir(hour int64) string { return filepath.Join(s.dir, HourName(hour)) }

// recordsDir is where an hour's records log keeps its segments: the hour's
// directory itself, so that a new hour costs one directory, not two.
func (s *Schedule) recordsDir(hour int64) string { return s.hourDir(hour) }

func (s *Schedule) dispatchedDir(hour int64) string {
	return filepath.Join(s.hourDir(hour), "dispatched")
}

// hour returns hour's logs, opening (and with create, creating) them and
// closing the least recently used hour when too many are open. It returns
// nil, nil for an hour that does not exist and create is false. s.mu is held.
func (s *Schedule) hour(hour int64, create bool) (*hourLog, error) {
	s.clock++
	if h := s.open[hour]; h != nil {
		h.used = s.clock
		return h, nil
	}
	if !ValidHour(hour) {
		return nil, fmt.Errorf("delaywheel: hour %d out of range", hour)
	}
	c := s.closed[hour]
	if c == nil && !create {
		return nil, nil
	}
	if len(s.open) >= s.maxOpen {
		s.closeLeastUsed()
	}
	if c == nil {
		c = &closedHour{}
		s.written[hour] = true // a new directory
	}
	h, err := s.openHour(hour, c)
	if err != nil {
		return nil, err
	}
	h.used = s.clock
	s.open[hour] = h
	delete(s.closed, hour)
	return h, nil
}

// openHour opens an hour's records, and its dispatch log if it has one; an
// hour not opened since OpenSchedule is cut back to its checkpoint's ends.
func (s *Schedule) openHour(hour int64, c *closedHour) (*hourLog, error) {
	records, err := logs.Open(s.recordsDir(hour), logs.KindSchedule, logs.Options{MaxPayload: maxRecordPayload, DurableEnd: c.ends.Records, Files: s.files})
	if err != nil {
		return nil, err
	}
	h := &hourLog{records: records}
	if c.dispatched || c.ends.Dispatched > 0 || (c.fresh && exists(s.dispatchedDir(hour))) {
		if err := s.openDispatched(hour, h, c.ends.Dispatched); err != nil {
			records.Close()
			return nil, err
		}
	}
	if c.fresh {
		err := records.TruncateTo(c.ends.Records)
		if h.dispatched != nil {
			err = errors.Join(err, h.dispatched.TruncateTo(c.ends.Dispatched))
		}
		if err != nil {
			h.close()
			return nil, fmt.Errorf("delaywheel: recover hour %s: %w", HourName(hour), err)
		}
	}
	return h, nil
}

func (s *Schedule) openDispatched(hour int64, h *hourLog, durableEnd int64) error {
	l, err := logs.Open(s.dispatchedDir(hour), logs.KindDispatch, logs.Options{FixedPayload: 8, DurableEnd: durableEnd, Files: s.files})
	if err != nil {
		return err
	}
	h.dispatched = l
	return nil
}

func (h *hourLog) close() error {
	err := h.records.Close()
	if h.dispatched != nil {
		err = errors.Join(err, h.dispatched.Close())
	}
	return err
}

// closeLeastUsed closes the least recently used open hour that no load is
// reading. If every open hour is being read, none is closed: the bound is
// exceeded until a load finishes.
func (s *Schedule) closeLeastUsed() {
	oldest, found := int64(0), false
	for hour, h := range s.open {
		if h.pins == 0 && (!found || h.used < s.open[oldest].used) {
			oldest, found = hour, true
		}
	}
	if found {
		s.closeHour(oldest)
	}
}

// closeHour flushes and closes an open hour. A failure (to write what it
// buffered, or one its log met before) is kept in closeErr, which every
// later Flush returns: the hour's log is gone, so nothing else would
// report it.
func (s *Schedule) closeHour(hour int64) {
	h := s.open[hour]
	delete(s.open, hour)
	if err := h.close(); err != nil {
		s.written[hour] = true
		s.closeErr = errors.Join(s.closeErr, fmt.Errorf("delaywheel: close hour %s: %w", HourName(hour), err))
	}
	s.closed[hour] = &closedHour{ends: h.ends(), dispatched: h.dispatched != nil}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// Append writes a message due at at into its hour's records and returns
// its reference. Like every log append it becomes readable at Flush.
func (s *Schedule) Append(at int64, m *message.Message) (uint64, error) {
	return s.AppendFor(at, m, "")
}

// AppendFor is Append of a message sent by application app ("" for none),
// which the record keeps (Read returns it).
func (s *Schedule) AppendFor(at int64, m *message.Message, app string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hour := Hour(at)
	h, err := s.hour(hour, true)
	if err != nil {
		return 0, err
	}
	off := h.records.Next()
	if off > maxRefOffset {
		return 0, fmt.Errorf("%w: hour %s holds over %d bytes", ErrHourFull, HourName(hour), int64(maxRefOffset))
	}
	if _, err := h.records.Append(appendRecord(nil, off, at, app, m)); err != nil {
		return 0, err
	}
	s.written[hour] = true
	return MakeRef(hour, off), nil
}

// A record's payload is its own offset in the hour's records, its due
// time, the application that sent it if any, and the message:
//
//	offset u64 | at i64 | [app string] | message (message.Message encoding)
//
// The offset makes a reference to anywhere but a record's start fail to
// read, even where a message body holds bytes shaped like a record. An
// offset is below 2^44 (a reference's 44 bits), so its top bit is free:
// set, it says the application's code follows the due time (binenc's
// uvarint length and bytes; at most limits.MaxName). Records from before
// applications never set it and read as they did.
// maxRecordPayload is the largest record payload: a message of
// limits.MaxMessage bytes and the record's header. It is never below the
// logs' default, which records written before the limit was defined once
// were held to.
const maxRecordPayload = max(limits.MaxMessage+limits.ScheduleRecordHeader, 16<<20)

// RecordSize returns how many bytes of an hour's records a message takes:
// where the next record starts after it.
func RecordSize(m *message.Message) int64 { return RecordSizeFor(m, "") }

// RecordSizeFor is RecordSize of a message sent by app.
func RecordSizeFor(m *message.Message, app string) int64 {
	n := 16 + m.EncodedSize()
	if app != "" {
		n += len(binenc.AppendString(nil, app))
	}
	return int64(logs.RecordSize(n))
}

// recordHasApp is the flag in a record's offset field saying the
// application's code follows.
const recordHasApp = 1 << 63

func appendRecord(b []byte, off, at int64, app string, m *message.Message) []byte {
	own := uint64(off)
	if app != "" {
		own |= recordHasApp
	}
	b = binary.LittleEndian.AppendUint64(b, own)
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	if app != "" {
		b = binenc.AppendString(b, app)
	}
	return m.AppendEncoded(b)
}

// Record is one schedule record: the message, when it is due, and the
// application that sent it ("" for none).
type Record struct {
	At      int64
	App     string
	Message *message.Message
}

// Read returns the due time and message a reference names. A reference to
// anything but a record's start is an error wrapping logs.ErrCorrupt.
func (s *Schedule) Read(ref uint64) (int64, *message.Message, error) {
	r, err := s.ReadRecord(ref)
	return r.At, r.Message, err
}

// ReadRecord returns the record a reference names (see Read).
func (s *Schedule) ReadRecord(ref uint64) (Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hour, off := SplitRef(ref)
	h, err := s.hour(hour, false)
	if err != nil {
		return Record{}, err
	}
	if h == nil {
		return Record{}, fmt.Errorf("%w: no schedule for hour %s", logs.ErrBeyondEnd, HourName(hour))
	}
	p, err := h.records.Read(off)
	if err != nil {
		return Record{}, err
	}
	own, rec, err := decodeRecord(p)
	if err == nil && own != off {
		err = fmt.Errorf("%w: schedule record at %d says it is at %d", logs.ErrCorrupt, off, own)
	}
	return rec, err
}

func decodeRecord(p []byte) (off int64, rec Record, err error) {
	r := binenc.NewReader(p)
	own := r.Uint64()
	rec.At = r.Int64()
	if own&recordHasApp != 0 {
		rec.App = r.String(limits.MaxName)
		if rec.App == "" && r.Err() == nil {
			err = errors.New("an empty application")
		}
	}
	if err == nil {
		rec.Message, err = message.Read(r)
	}
	if err == nil {
		err = r.Done()
	}
	if err != nil {
		return 0, Record{}, fmt.Errorf("%w: schedule record: %w", logs.ErrCorrupt, err)
	}
	return int64(own &^ recordHasApp), rec, nil
}

// Dispatch records that the entry ref was fired.
func (s *Schedule) Dispatch(ref uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	hour, off := SplitRef(ref)
	h, err := s.hour(hour, false)
	if err != nil {
		return err
	}
	if h == nil {
		return fmt.Errorf("%w: no schedule for hour %s", logs.ErrBeyondEnd, HourName(hour))
	}
	if h.dispatched == nil {
		if err := s.openDispatched(hour, h, 0); err != nil {
			return err
		}
	}
	_, err = h.dispatched.Append(binary.LittleEndian.AppendUint64(nil, uint64(off)))
	s.written[hour] = true
	return err
}

// Load calls fn with every entry of hour not yet dispatched, in the order
// they were appended: what the leader puts into its wheel. It reads what
// was flushed, without holding up appends meanwhile; an entry fired during
// the load may still be passed to fn.
func (s *Schedule) Load(hour int64, fn func(Entry) error) error {
	s.mu.Lock()
	h, err := s.hour(hour, false)
	if err != nil || h == nil {
		s.mu.Unlock()
		return err
	}
	h.pins++
	dispatched := h.dispatched
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		h.pins--
		s.mu.Unlock()
	}()
	fired := map[int64]bool{}
	if dispatched != nil {
		err = dispatched.Scan(dispatched.Start(), func(_ int64, p []byte) error {
			fired[int64(binary.LittleEndian.Uint64(p))] = true
			return nil
		})
		if err != nil {
			return err
		}
	}
	return h.records.Scan(h.records.Start(), func(off int64, p []byte) error {
		if fired[off] || len(p) < 16 {
			return nil
		}
		return fn(Entry{At: int64(binary.LittleEndian.Uint64(p[8:])), Ref: MakeRef(hour, off), Size: int32(logs.RecordSize(len(p)))})
	})
}

// Dispatched calls fn with the offset of every record of hour fired so
// far: the state machine rebuilds its set of fired entries from it.
func (s *Schedule) Dispatched(hour int64, fn func(off int64)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.hour(hour, false)
	if err != nil || h == nil || h.dispatched == nil {
		return err
	}
	return h.dispatched.Scan(h.dispatched.Start(), func(_ int64, p []byte) error {
		fn(int64(binary.LittleEndian.Uint64(p)))
		return nil
	})
}

// Remove deletes an hour whose entries were all dispatched. It returns
// ErrBusy, and removes nothing, while a Load reads the hour.
func (s *Schedule) Remove(hour int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.open[hour]; h != nil {
		if h.pins > 0 {
			return ErrBusy
		}
		s.closeHour(hour)
	}
	delete(s.closed, hour)
	delete(s.written, hour)
	if err := os.RemoveAll(s.hourDir(hour)); err != nil {
		return fmt.Errorf("delaywheel: remove hour %s: %w", HourName(hour), err)
	}
	return nil
}

// Ends returns where an hour's logs end now (below what was flushed), or
// false for an hour the schedule does not hold.
func (s *Schedule) Ends(hour int64) (HourEnds, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.open[hour]; h != nil {
		return h.ends(), true
	}
	if c := s.closed[hour]; c != nil {
		return c.ends, true
	}
	return HourEnds{}, false
}

// Files lists the segment files of an hour's two logs below ends, with
// their paths relative to the schedule's directory, for a snapshot; the
// caller flushed the schedule first. It reads only the hour's directories
// (never the files), and lists a closed hour once, so a snapshot of
// thousands of hours costs a listing of those touched since the last.
func (s *Schedule) Files(hour int64, ends HourEnds) ([]logs.SegmentInfo, error) {
	s.mu.Lock()
	c := s.closed[hour]
	if c != nil && c.files != nil && c.ends == ends {
		s.mu.Unlock()
		return c.files, nil
	}
	s.mu.Unlock()
	out, err := logs.SegmentFiles(s.recordsDir(hour), ends.Records)
	if err != nil {
		return nil, err
	}
	if ends.Dispatched > 0 {
		dispatched, err := logs.SegmentFiles(s.dispatchedDir(hour), ends.Dispatched)
		if err != nil {
			return nil, err
		}
		out = append(out, dispatched...)
	}
	for i := range out {
		if out[i].Path, err = filepath.Rel(s.dir, out[i].Path); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	if c := s.closed[hour]; c != nil && c.ends == ends {
		c.files = out
	}
	s.mu.Unlock()
	return out, nil
}

// OpenHours returns how many hours are open now.
func (s *Schedule) OpenHours() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Hours lists the hours present on disk, oldest first. It reads the
// directory, so it is for tools and tests, not for start-up.
func (s *Schedule) Hours() []int64 {
	entries, _ := os.ReadDir(s.dir)
	var out []int64
	for _, e := range entries {
		if hour, ok := parseHourName(e.Name()); ok && e.IsDir() {
			out = append(out, hour)
		}
	}
	slices.Sort(out)
	return out
}

// Flush makes every append to an open hour readable. It returns a
// failure to close an hour (see closeHour) too: the schedule closes hours
// as others open, within a batch of appends, and the writer must stop at
// that batch, as at a failed write.
func (s *Schedule) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := []error{s.closeErr}
	for _, h := range s.open {
		errs = append(errs, h.records.Flush())
		if h.dispatched != nil {
			errs = append(errs, h.dispatched.Flush())
		}
	}
	return errors.Join(errs...)
}

// Failed returns a failure an hour met outside the writer, or in closing:
// a failure to close an hour, or the sticky failure of an open hour's log
// (a file cache's fsync of one of its files, evicting it: see
// logs.Log.Failed), or nil. Any goroutine; a checkpoint asks it before it
// records the hours' ends as durable.
func (s *Schedule) Failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr != nil {
		return s.closeErr
	}
	for hour, h := range s.open { // a map: any failure will do
		err := h.records.Failed()
		if err == nil && h.dispatched != nil {
			err = h.dispatched.Failed()
		}
		if err != nil {
			return fmt.Errorf("delaywheel: hour %s: %w", HourName(hour), err)
		}
	}
	return nil
}

// Sync makes every hour created or written since the last Sync durable,
// open or closed, with their directories: see syncHours.
func (s *Schedule) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.closeErr; err != nil {
		return err
	}
	// Every open hour, written since the last Sync or not: the sticky error
	// of an hour's log may also come from an fsync of its file by the file
	// cache, evicting it.
	for _, h := range s.open {
		if err := h.records.Flush(); err != nil {
			return err
		}
		if h.dispatched != nil {
			if err := h.dispatched.Flush(); err != nil {
				return err
			}
		}
	}
	if len(s.written) == 0 {
		return nil
	}
	if err := syncHours(s.dirFile, s.written, s.syncfs); err != nil {
		return fmt.Errorf("delaywheel: sync schedule: %w", err)
	}
	clear(s.written)
	return nil
}

// Close flushes and closes every open hour, and the schedule directory. It
// does not sync: call Sync first where durability matters.
func (s *Schedule) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for hour := range s.open {
		s.closeHour(hour)
	}
	if s.dirFile != nil {
		if err := s.dirFile.Close(); err != nil {
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("delaywheel: close schedule directory: %w", err))
		}
		s.dirFile = nil
	}
	return s.closeErr
}

// ValidHour reports whether a reference can name hour.
func ValidHour(hour int64) bool { return hour >= 0 && hour <= maxRefHour }

// IsHourName reports whether name is an hour directory's name.
func IsHourName(name string) bool {
	_, ok := parseHourName(name)
	return ok
}
