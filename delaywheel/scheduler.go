package delaywheel

import (
	"fmt"
	"time"
)

// Tick and Span are the leader's wheel: 100 ms slots over two hours, so the
// current and the next hour of delivery time always fit.
const (
	Tick = 100 * time.Millisecond
	Span = 2 * time.Hour
)

// Source gives the scheduler an hour's entries not yet fired: the schedule
// log on a broker group's leader.
type Source interface {
	Load(hour int64, fn func(Entry) error) error
}

// Scheduler is a leader's view of what is due: a wheel holding every
// pending entry of the hours up to the next one, refilled from the Source
// as time moves into each new hour. Like the wheel it reads no clock. It is
// not safe for concurrent use.
type Scheduler struct {
	src    Source
	wheel  *Wheel
	loaded int64 // every hour up to this one is in the wheel
}

// NewScheduler starts a scheduler at now, so that a new leader picks up
// where the last one stopped: it loads the current and the next hour, and
// each of overdue, the earlier hours that still hold pending entries (the
// state machine knows which).
func NewScheduler(src Source, now int64, overdue []int64) (*Scheduler, error) {
	w, err := New(Tick, Span, now)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{src: src, wheel: w, loaded: Hour(now) + 1}
	for _, h := range overdue {
		if h < Hour(now) {
			if err := s.load(h); err != nil {
				return nil, err
			}
		}
	}
	for h := Hour(now); h <= s.loaded; h++ {
		if err := s.load(h); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Scheduler) load(hour int64) error {
	err := s.src.Load(hour, func(e Entry) error { return s.wheel.Add(e) })
	if err != nil {
		return fmt.Errorf("delaywheel: load hour %s: %w", HourName(hour), err)
	}
	return nil
}

// Add takes an entry scheduled while leading (or one whose firing failed,
// to try again). One due after the loaded hours is left to be loaded with
// its hour.
func (s *Scheduler) Add(e Entry) {
	if Hour(e.At) <= s.loaded {
		// The wheel's horizon is at least the end of the loaded hours (it
		// was last turned in the hour before), so this cannot be refused.
		s.wheel.Add(e)
	}
}

// Due returns, appended to dst, the entries due at now. When now has moved
// into a new hour it first turns the wheel (so the horizon covers the next
// hour), loads the hours that became near, and takes what of them is due.
func (s *Scheduler) Due(now int64, dst []Entry) ([]Entry, error) {
	dst = s.wheel.Due(now, dst)
	next := Hour(now) + 1
	if s.loaded >= next {
		return dst, nil
	}
	for s.loaded < next {
		if err := s.load(s.loaded + 1); err != nil {
			return dst, err
		}
		s.loaded++
	}
	return s.wheel.Due(now, dst), nil // a jump of hours may have loaded overdue entries
}

// Pending returns how many entries the scheduler holds.
func (s *Scheduler) Pending() int { return s.wheel.Len() }
