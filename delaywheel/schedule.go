package delaywheel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
// Like the other logs, it is written by one goroutine (the state
// machine's apply) and read without locks below each log's flushed end.
type Schedule struct {
	dir     string
	maxOpen int
	open    map[int64]*hourLog
	clock   uint64 // use counter, for closing the least recently used hour
}

type hourLog struct {
	records    *logs.Log
	dispatched *logs.Log // fixed 8-byte payloads: record offsets
	used       uint64
}

// OpenSchedule opens the schedule log in dir, creating it; it opens no hour
// until one is used. maxOpen (at least 2) bounds the hours open at once.
func OpenSchedule(dir string, maxOpen int) (*Schedule, error) {
	if maxOpen < 2 {
		return nil, fmt.Errorf("delaywheel: at least 2 open hours, not %d", maxOpen)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("delaywheel: create schedule directory: %w", err)
	}
	return &Schedule{dir: dir, maxOpen: maxOpen, open: map[int64]*hourLog{}}, nil
}

func (s *Schedule) hourDir(hour int64) string { return filepath.Join(s.dir, HourName(hour)) }

// hour returns hour's logs, opening (and with create, creating) them and
// closing the least recently used hour when too many are open. It returns
// nil, nil for an hour that does not exist and create is false.
func (s *Schedule) hour(hour int64, create bool) (*hourLog, error) {
	s.clock++
	if h := s.open[hour]; h != nil {
		h.used = s.clock
		return h, nil
	}
	if hour < 0 || hour > maxRefHour {
		return nil, fmt.Errorf("delaywheel: hour %d out of range", hour)
	}
	dir := s.hourDir(hour)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) && !create {
		return nil, nil
	}
	if len(s.open) >= s.maxOpen {
		if err := s.closeLeastUsed(); err != nil {
			return nil, err
		}
	}
	records, err := logs.Open(filepath.Join(dir, "records"), logs.KindSchedule, logs.Options{})
	if err != nil {
		return nil, err
	}
	dispatched, err := logs.Open(filepath.Join(dir, "dispatched"), logs.KindDispatch, logs.Options{FixedPayload: 8})
	if err != nil {
		records.Close()
		return nil, err
	}
	h := &hourLog{records: records, dispatched: dispatched, used: s.clock}
	s.open[hour] = h
	return h, nil
}

// closeLeastUsed makes the least recently used open hour durable and
// closes it.
func (s *Schedule) closeLeastUsed() error {
	var oldest int64
	first := true
	for hour, h := range s.open {
		if first || h.used < s.open[oldest].used {
			oldest, first = hour, false
		}
	}
	return s.closeHour(oldest)
}

func (s *Schedule) closeHour(hour int64) error {
	h := s.open[hour]
	delete(s.open, hour)
	return errors.Join(h.records.Sync(), h.dispatched.Sync(), h.records.Close(), h.dispatched.Close())
}

// Append writes a message due at at into its hour's records and returns
// its reference. Like every log append it becomes readable at Flush.
func (s *Schedule) Append(at int64, m *logs.Message) (uint64, error) {
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
// they were appended: what the leader puts into its wheel.
func (s *Schedule) Load(hour int64, fn func(Entry) error) error {
	h, err := s.hour(hour, false)
	if err != nil || h == nil {
		return err
	}
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

// Remove deletes an hour whose entries were all dispatched.
func (s *Schedule) Remove(hour int64) error {
	if s.open[hour] != nil {
		if err := s.closeHour(hour); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(s.hourDir(hour)); err != nil {
		return fmt.Errorf("delaywheel: remove hour %s: %w", HourName(hour), err)
	}
	return nil
}

// Hours lists the hours present on disk, oldest first. It reads the
// directory, so it is for tools and tests, not for start-up.
func (s *Schedule) Hours() ([]int64, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("delaywheel: list schedule: %w", err)
	}
	var out []int64
	for _, e := range entries {
		t, err := time.Parse("2006010215", e.Name())
		if err != nil || !e.IsDir() || len(e.Name()) != 10 {
			continue
		}
		out = append(out, t.UnixMilli()/HourMillis)
	}
	slices.Sort(out)
	return out, nil
}

// Flush makes every append to an open hour readable.
func (s *Schedule) Flush() error {
	var errs []error
	for _, h := range s.open {
		errs = append(errs, h.records.Flush(), h.dispatched.Flush())
	}
	return errors.Join(errs...)
}

// Sync makes every open hour durable.
func (s *Schedule) Sync() error {
	var errs []error
	for _, h := range s.open {
		errs = append(errs, h.records.Sync(), h.dispatched.Sync())
	}
	return errors.Join(errs...)
}

// Close makes every open hour durable and closes it.
func (s *Schedule) Close() error {
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
