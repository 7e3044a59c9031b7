package delaywheel

import (
	"errors"
	"fmt"
	"time"
)

// ErrBeyondHorizon means an entry is due at or after the wheel's horizon:
// the caller keeps it on disk and adds it once the wheel has turned far
// enough.
var ErrBeyondHorizon = errors.New("delaywheel: entry beyond the wheel's horizon")

// Entry is one scheduled delivery: when it is due, and where its message
// lies. The wheel never interprets Ref.
type Entry struct {
	At   int64  // due time, Unix milliseconds
	Ref  uint64 // the message's place in the schedule log
	Size int32  // the bytes of its schedule record, which firing it moves into the message log
}

// Wheel is a hashed timing wheel with no clock of its own: a ring of slots,
// each holding the entries due within one tick, covering a span of time
// from the current slot. Every call is told the time. It is not safe for
// concurrent use.
//
// An entry costs its 16 bytes in a slot's slice (plus the slice's spare
// capacity); the slots themselves cost 24 bytes each whether used or not.
type Wheel struct {
	tick  int64     // slot width, milliseconds
	slots [][]Entry // the ring
	cur   int       // the current slot
	start int64     // when the current slot begins; a multiple of tick
	n     int       // entries held
}

// New returns an empty wheel of slots tick wide covering span from now.
// Tick must be at least a millisecond and divide span.
func New(tick, span time.Duration, now int64) (*Wheel, error) {
	t, s := tick.Milliseconds(), span.Milliseconds()
	if t <= 0 || s < t || s%t != 0 {
		return nil, fmt.Errorf("delaywheel: tick %s must be at least 1ms and divide span %s", tick, span)
	}
	return &Wheel{tick: t, slots: make([][]Entry, s/t), start: now - floorMod(now, t)}, nil
}

// Len returns how many entries the wheel holds.
func (w *Wheel) Len() int { return w.n }

// Horizon returns the earliest due time the wheel cannot hold yet.
func (w *Wheel) Horizon() int64 { return w.start + int64(len(w.slots))*w.tick }

// Add schedules e. An entry already due goes into the current slot, to come
// out of the next Due; one at or beyond the horizon is refused with
// ErrBeyondHorizon.
func (w *Wheel) Add(e Entry) error {
	if e.At >= w.Horizon() {
		return fmt.Errorf("%w: due at %d, horizon %d", ErrBeyondHorizon, e.At, w.Horizon())
	}
	i := w.cur
	if e.At >= w.start {
		i = (w.cur + int((e.At-w.start)/w.tick)) % len(w.slots)
	}
	w.slots[i] = append(w.slots[i], e)
	w.n++
	return nil
}

// Due removes every entry due at or before now, appends them to dst in
// slot order, and returns dst. It never returns an entry early. Time that
// goes back is taken as no time passing.
func (w *Wheel) Due(now int64, dst []Entry) []Entry {
	// Slots that ended at or before now: every entry in them is due.
	for turned := 0; w.start+w.tick <= now; turned++ {
		if turned == len(w.slots) {
			// A whole turn is done, so the ring is empty: jump to now.
			w.start = now - floorMod(now, w.tick)
			break
		}
		dst = append(dst, w.slots[w.cur]...)
		w.n -= len(w.slots[w.cur])
		w.slots[w.cur] = nil // free it: the next turn may need less
		w.cur = (w.cur + 1) % len(w.slots)
		w.start += w.tick
	}
	// The current slot: only what is due by now.
	slot := w.slots[w.cur]
	kept := slot[:0]
	for _, e := range slot {
		if e.At <= now {
			dst = append(dst, e)
			w.n--
		} else {
			kept = append(kept, e)
		}
	}
	clear(slot[len(kept):])
	w.slots[w.cur] = kept
	return dst
}

// floorMod is a mod b in [0, b), also for negative a.
func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
