package delaywheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/binenc"
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
// a directory of its own holding two logs: the records (each a due time and
// the whole message) and the dispatch log (the offset of each record
// fired). Only hours in use are open, at most MaxOpen at once, so the
// thousands of hours two years hold cost nothing until they are near.
//
// One goroutine writes (the state machine's apply); Load and Read may run
// on others. A mutex guards which hours are open; the logs themselves are
// read without locks below their flushed ends.
type Schedule struct {
	dir     string
	maxOpen int

	mu    sync.Mutex
	open  map[int64]*hourLog
	ends  map[int64]HourEnds // every hour known and not open: where its logs end
	fresh map[int64]bool     // hours not opened since OpenSchedule: cut back to ends on first open
	clock uint64             // use counter, for closing the least recently used hour
}

// HourEnds is where an hour's two logs end.
type HourEnds struct{ Records, Dispatched int64 }

type hourLog struct {
	records    *logs.Log
	dispatched *logs.Log // fixed 8-byte payloads: record offsets
	used       uint64
	pins       int // loads reading it without the lock: not closed for room
}

// OpenSchedule opens the schedule log in dir, creating it. known names
// every hour the caller's checkpoint holds, with where its logs ended then:
// those hours are cut back to those ends when first opened, and every other
// hour directory (created after the checkpoint, or emptied before it) is
// removed now, with one listing of dir. No hour is opened until used;
// maxOpen (at least 2) bounds the hours open at once.
func OpenSchedule(dir string, maxOpen int, known map[int64]HourEnds) (*Schedule, error) {
	if maxOpen < 2 {
		return nil, fmt.Errorf("delaywheel: at least 2 open hours, not %d", maxOpen)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delaywheel: create schedule directory: %w", err)
	}
	s := &Schedule{dir: dir, maxOpen: maxOpen, open: map[int64]*hourLog{}, ends: map[int64]HourEnds{}, fresh: map[int64]bool{}}
	for hour, e := range known {
		s.ends[hour], s.fresh[hour] = e, true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("delaywheel: list schedule: %w", err)
	}
	for _, e := range entries {
		if hour, ok := parseHourName(e.Name()); ok && !s.fresh[hour] {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
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

// hour returns hour's logs, opening (and with create, creating) them and
// closing the least recently used hour when too many are open. It returns
// nil, nil for an hour that does not exist and create is false. s.mu is held.
func (s *Schedule) hour(hour int64, create bool) (*hourLog, error) {
	s.clock++
	if h := s.open[hour]; h != nil {
		h.used = s.clock
		return h, nil
	}
	if hour < 0 || hour > maxRefHour {
		return nil, fmt.Errorf("delaywheel: hour %d out of range", hour)
	}
	if _, known := s.ends[hour]; !known && !create {
		return nil, nil
	}
	if len(s.open) >= s.maxOpen {
		if err := s.closeLeastUsed(); err != nil {
			return nil, err
		}
	}
	h, err := s.openHour(hour)
	if err != nil {
		return nil, err
	}
	h.used = s.clock
	s.open[hour] = h
	delete(s.ends, hour)
	return h, nil
}

// openHour opens an hour's two logs; an hour not opened since
// OpenSchedule is cut back to the ends its checkpoint recorded.
func (s *Schedule) openHour(hour int64) (*hourLog, error) {
	dir, ends, fresh := s.hourDir(hour), s.ends[hour], s.fresh[hour]
	records, err := logs.Open(filepath.Join(dir, "records"), logs.KindSchedule, logs.Options{DurableEnd: ends.Records})
	if err != nil {
		return nil, err
	}
	dispatched, err := logs.Open(filepath.Join(dir, "dispatched"), logs.KindDispatch, logs.Options{FixedPayload: 8, DurableEnd: ends.Dispatched})
	if err != nil {
		records.Close()
		return nil, err
	}
	if fresh {
		if err := errors.Join(records.TruncateTo(ends.Records), dispatched.TruncateTo(ends.Dispatched)); err != nil {
			records.Close()
			dispatched.Close()
			return nil, fmt.Errorf("delaywheel: recover hour %s: %w", HourName(hour), err)
		}
		delete(s.fresh, hour)
	}
	return &hourLog{records: records, dispatched: dispatched}, nil
}

// closeLeastUsed makes the least recently used open hour that no load is
// reading durable and closes it. If every open hour is being read, none is
// closed: the bound is exceeded until a load finishes.
func (s *Schedule) closeLeastUsed() error {
	oldest, found := int64(0), false
	for hour, h := range s.open {
		if h.pins == 0 && (!found || h.used < s.open[oldest].used) {
			oldest, found = hour, true
		}
	}
	if !found {
		return nil
	}
	return s.closeHour(oldest)
}

func (s *Schedule) closeHour(hour int64) error {
	h := s.open[hour]
	delete(s.open, hour)
	err := errors.Join(h.records.Sync(), h.dispatched.Sync(), h.records.Close(), h.dispatched.Close())
	s.ends[hour] = HourEnds{Records: h.records.End(), Dispatched: h.dispatched.End()}
	return err
}

// Append writes a message due at at into its hour's records and returns
// its reference. Like every log append it becomes readable at Flush.
func (s *Schedule) Append(at int64, m *logs.Message) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hour := Hour(at)
	h, err := s.hour(hour, true)
	if err != nil {
		return 0, err
	}
	payload := m.AppendEncoded(binary.LittleEndian.AppendUint64(make([]byte, 0, 8+m.EncodedSize()), uint64(at)))
	off, err := h.records.Append(payload)
	if err != nil {
		return 0, err
	}
	if off > maxRefOffset {
		return 0, fmt.Errorf("delaywheel: hour %s holds over %d bytes", HourName(hour), int64(maxRefOffset))
	}
	return MakeRef(hour, off), nil
}

// Read returns the due time and message a reference names.
func (s *Schedule) Read(ref uint64) (int64, *logs.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hour, off := SplitRef(ref)
	h, err := s.hour(hour, false)
	if err != nil {
		return 0, nil, err
	}
	if h == nil {
		return 0, nil, fmt.Errorf("%w: no schedule for hour %s", logs.ErrBeyondEnd, HourName(hour))
	}
	p, err := h.records.Read(off)
	if err != nil {
		return 0, nil, err
	}
	return decodeRecord(p)
}

func decodeRecord(p []byte) (int64, *logs.Message, error) {
	r := binenc.NewReader(p)
	at := r.Int64()
	m, err := logs.ReadMessage(r)
	if err == nil {
		err = r.Done()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("%w: schedule record: %w", logs.ErrCorrupt, err)
	}
	return at, m, nil
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
	_, err = h.dispatched.Append(binary.LittleEndian.AppendUint64(nil, uint64(off)))
	return err
}

// Load calls fn with every entry of hour not yet dispatched, in the order
// they were appended: what the leader puts into its wheel. It reads what
// was flushed when it began, without holding up appends meanwhile; an entry
// fired during the load may still be passed to fn.
func (s *Schedule) Load(hour int64, fn func(Entry) error) error {
	s.mu.Lock()
	h, err := s.hour(hour, false)
	if err != nil || h == nil {
		s.mu.Unlock()
		return err
	}
	h.pins++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		h.pins--
		s.mu.Unlock()
	}()
	fired := map[int64]bool{}
	err = h.dispatched.Scan(h.dispatched.Start(), func(_ int64, p []byte) error {
		fired[int64(binary.LittleEndian.Uint64(p))] = true
		return nil
	})
	if err != nil {
		return err
	}
	return h.records.Scan(h.records.Start(), func(off int64, p []byte) error {
		if fired[off] || len(p) < 8 {
			return nil
		}
		return fn(Entry{At: int64(binary.LittleEndian.Uint64(p)), Ref: MakeRef(hour, off)})
	})
}

// Dispatched calls fn with the offset of every record of hour fired so
// far: the state machine rebuilds its set of fired entries from it.
func (s *Schedule) Dispatched(hour int64, fn func(off int64)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, err := s.hour(hour, false)
	if err != nil || h == nil {
		return err
	}
	return h.dispatched.Scan(h.dispatched.Start(), func(_ int64, p []byte) error {
		fn(int64(binary.LittleEndian.Uint64(p)))
		return nil
	})
}

// Remove deletes an hour whose entries were all dispatched.
func (s *Schedule) Remove(hour int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[hour] != nil {
		if err := s.closeHour(hour); err != nil {
			return err
		}
	}
	delete(s.ends, hour)
	delete(s.fresh, hour)
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
		return HourEnds{Records: h.records.End(), Dispatched: h.dispatched.End()}, true
	}
	e, ok := s.ends[hour]
	return e, ok
}

// Files lists the segment files of an hour's two logs below ends, with
// their paths relative to the schedule's directory, for a snapshot. The
// caller synced the schedule first. Hours not open are listed without
// opening them.
func (s *Schedule) Files(hour int64, ends HourEnds) ([]logs.SegmentInfo, error) {
	dir := s.hourDir(hour)
	records, err := logs.SegmentFiles(filepath.Join(dir, "records"), ends.Records)
	if err != nil {
		return nil, err
	}
	dispatched, err := logs.SegmentFiles(filepath.Join(dir, "dispatched"), ends.Dispatched)
	if err != nil {
		return nil, err
	}
	out := append(records, dispatched...)
	for i := range out {
		rel, err := filepath.Rel(s.dir, out[i].Path)
		if err != nil {
			return nil, err
		}
		out[i].Path = rel
	}
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

// Flush makes every append to an open hour readable.
func (s *Schedule) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, h := range s.open {
		errs = append(errs, h.records.Flush(), h.dispatched.Flush())
	}
	return errors.Join(errs...)
}

// Sync makes every open hour durable (closed hours were synced when
// closed), and the schedule's directory.
func (s *Schedule) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, h := range s.open {
		errs = append(errs, h.records.Sync(), h.dispatched.Sync())
	}
	errs = append(errs, syncDir(s.dir))
	return errors.Join(errs...)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("delaywheel: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("delaywheel: sync %s: %w", dir, err)
	}
	return nil
}

// Close makes every open hour durable and closes it.
func (s *Schedule) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for hour := range s.open {
		errs = append(errs, s.closeHour(hour))
	}
	return errors.Join(errs...)
}

// String names the schedule by its directory, for logs.
func (s *Schedule) String() string {
	return "schedule " + s.dir + " (" + strconv.Itoa(len(s.open)) + " hours open)"
}

// ValidHour reports whether a reference can name hour.
func ValidHour(hour int64) bool { return hour >= 0 && hour <= maxRefHour }

// IsHourName reports whether name is an hour directory's name.
func IsHourName(name string) bool {
	_, ok := parseHourName(name)
	return ok
}
