package fsm

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// Delayed messages. An Append of a message due after the leader-stamped
// time writes it to the schedule log of its hour of delivery (see package
// delaywheel), counts it pending, and records it in the journal for the
// dedup window; a Fire moves it to the message log when due. The leader
// learns of every entry scheduled through OnSchedule, and loads whole hours
// through LoadSchedule.

// maxDelayedPerHour is limits.MaxDelayedPerHour; tests lower it.
var maxDelayedPerHour int64 = limits.MaxDelayedPerHour

// checkSchedule refuses a delayed message its hour or its sender (nil for
// none) has no room for: the hour holds maxDelayedPerHour delayed messages
// already (pending or fired: the leader's wheel and every replica's fired
// set grow with them), or the application has its most pending in this
// broker group, or its most in this hour (so that one application sending
// and sending again as its messages fire cannot fill an hour for others).
func (f *FSM) checkSchedule(hour int64, s *Sender) error {
	hs := f.st.hours[hour]
	if hs == nil {
		hs = &hourState{}
	}
	if s != nil {
		if err := limits.CheckName("application", s.App); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if n := f.st.appDelayed[s.App]; n >= s.MaxDelayed {
			return fmt.Errorf("%w: application %s has %d delayed messages pending in this broker group (at most %d)", ErrLimit, s.App, n, s.MaxDelayed)
		}
		if n := hs.apps[s.App]; n >= s.MaxDelayed {
			return fmt.Errorf("%w: application %s has %d delayed messages in hour %s of delivery time in this broker group (at most %d)",
				ErrLimit, s.App, n, hourName(hour), s.MaxDelayed)
		}
	}
	if hs.delayed >= maxDelayedPerHour {
		return fmt.Errorf("%w: hour %s of delivery time holds %d delayed messages in this broker group (at most %d)",
			ErrLimit, hourName(hour), hs.delayed, maxDelayedPerHour)
	}
	return nil
}

// hourName names an hour of delivery time in errors: 2026-11-30T14Z.
func hourName(hour int64) string {
	return time.UnixMilli(hour * delaywheel.HourMillis).UTC().Format("2006-01-02T15Z")
}

// schedule writes a delayed message, whose id's hash is h, sent by s (nil
// for none): the schedule log, the journal, the pending counts and the
// dedup window.
func (f *FSM) schedule(index uint64, now int64, m *message.Message, h uint64, s *Sender) MessageResult {
	hour := delaywheel.Hour(m.DeliverAt) // a valid hour: CheckMessage saw to it
	if err := f.checkSchedule(hour, s); err != nil {
		return MessageResult{Status: Rejected, Offset: -1, Seq: -1, Err: err}
	}
	app := ""
	if s != nil {
		app = s.App
	}
	m.Index, m.AppendedAt = index, now
	ref, err := f.store.sched.AppendFor(m.DeliverAt, m, app)
	if errors.Is(err, delaywheel.ErrHourFull) {
		// The hour's records reach what a reference can name: the same
		// state gives every replica the same answer.
		return MessageResult{Status: Rejected, Offset: -1, Seq: -1, Err: fmt.Errorf("%w: %w", ErrInvalid, err)}
	}
	must(0, err)
	must(0, f.store.journal.Append(delaywheel.JournalEntry{AppendedAt: now, Hash: h, Ref: ref}))
	f.delayedDedup.AddHash(h, now, dedup.Seen{Offset: int64(ref)})
	hs := f.pend(hour, delaywheel.Entry{At: m.DeliverAt, Ref: ref, Size: int32(delaywheel.RecordSizeFor(m, app))})
	hs.delayed++
	f.st.delayed[m.Subject]++
	if app != "" {
		f.st.appDelayed[app]++
		if hs.apps == nil {
			hs.apps = map[string]int64{}
		}
		hs.apps[app]++
	}
	f.useSubject(m.Subject)
	return MessageResult{Status: Scheduled, Offset: -1, Seq: -1, Ref: ref, At: m.DeliverAt}
}

// pend counts a record just written to the schedule pending in its hour,
// and gives it to the leader's wheel once the batch is applied.
func (f *FSM) pend(hour int64, e delaywheel.Entry) *hourState {
	hs := f.st.hours[hour]
	if hs == nil {
		hs = &hourState{fired: map[int64]struct{}{}}
		f.st.hours[hour] = hs
	}
	hs.pending++
	f.scheduled = append(f.scheduled, e)
	return hs
}

// isDelayedDuplicate reports whether id (hash h) was scheduled within the
// window ending at now, and where. A hit is confirmed by reading the
// schedule record. (Apply expires the window to now first; a look between
// applies, Holds, may meet records past it.)
func (f *FSM) isDelayedDuplicate(id string, h uint64, now int64) (uint64, bool) {
	candidates := f.delayedDedup.LookupHash(h)
	if len(candidates) == 0 {
		return 0, false
	}
	must(0, f.store.sched.Flush())
	for _, s := range candidates {
		// An hour is removed only after the dedup window of its last append
		// has passed, so the record is there.
		if _, prev := must2(f.store.sched.Read(uint64(s.Offset))); prev.ID == id && f.delayedDedup.Within(prev.AppendedAt, now) {
			return uint64(s.Offset), true
		}
	}
	return 0, false
}

// firedSet returns the set of fired offsets of an hour, rebuilding it from
// the dispatch log if this replica has not needed it since it opened.
func (f *FSM) firedSet(hour int64, hs *hourState) map[int64]struct{} {
	if hs.fired == nil {
		hs.fired = map[int64]struct{}{}
		must(0, f.store.sched.Dispatched(hour, func(off int64) { hs.fired[off] = struct{}{} }))
	}
	return hs.fired
}

// sweepHours forgets the hours whose every entry was fired, once their
// last append's dedup window has passed too (no lookup reads them again,
// and no append can add to an hour that has ended). Their directories go
// after the next checkpoint, which no longer names them: until then, a
// restart replays the Fires that emptied them, which read their records.
// It runs when the state's clock enters a new hour, so every replica
// sweeps at the same entry.
func (f *FSM) sweepHours(now int64) {
	for hour, hs := range f.st.hours {
		if hs.pending == 0 && (hour+1)*delaywheel.HourMillis+f.st.config.DedupWindow <= now {
			delete(f.st.hours, hour)
			f.emptied = append(f.emptied, hour)
		}
	}
}

// removeEmptiedHours deletes the hours of emptied (those swept before a
// checkpoint that no longer names them was written). One swept since, or
// one a leader is still reading, is kept for the next checkpoint.
func (f *FSM) removeEmptiedHours(emptied []int64) {
	kept := f.emptied[:0]
	for _, hour := range f.emptied {
		if !slices.Contains(emptied, hour) {
			kept = append(kept, hour) // emptied after the checkpoint
			continue
		}
		err := f.store.sched.Remove(hour)
		switch {
		case errors.Is(err, delaywheel.ErrBusy):
			kept = append(kept, hour)
		case err != nil:
			// Harmless: Open removes hours its checkpoint does not name.
			f.log.Warn("removing an emptied schedule hour", "hour", delaywheel.HourName(hour), "error", err)
		}
	}
	f.emptied = kept
}

// OnSchedule sets a function called, on the apply goroutine, with every
// delayed message scheduled, once its batch is applied and its record is
// readable (so a LoadSchedule that starts after the call sees it); nil
// stops the calls. It must not block. A leader feeds its wheel from it.
func (f *FSM) OnSchedule(fn func(delaywheel.Entry)) {
	if fn == nil {
		f.onSchedule.Store(nil)
		return
	}
	f.onSchedule.Store(&fn)
}

// announceScheduled hands the entries the batch scheduled to OnSchedule's
// function, after the batch was flushed.
func (f *FSM) announceScheduled() {
	if fn := f.onSchedule.Load(); fn != nil {
		for _, e := range f.scheduled {
			(*fn)(e)
		}
	}
	f.scheduled = f.scheduled[:0]
}

// LoadSchedule calls fn with every entry of hour not yet fired (it may
// also pass entries fired while it reads). Safe on any goroutine; appends
// go on while it reads.
func (f *FSM) LoadSchedule(hour int64, fn func(delaywheel.Entry) error) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return logs.ErrClosed
	}
	return f.store.sched.Load(hour, fn)
}

// DelayStats is what the schedule holds: pending delayed messages per hour
// of delivery time and per subject.
type DelayStats struct {
	Pending  int64
	Hours    []HourPending // oldest first
	Subjects map[string]int64
}

// HourPending is the number of delayed messages pending in one hour.
type HourPending struct {
	Hour    int64 // hours since the Unix epoch (delaywheel.Hour)
	Pending int64
}

// Delays returns the schedule's pending counts. Safe on any goroutine.
func (f *FSM) Delays() DelayStats {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	out := DelayStats{Subjects: map[string]int64{}}
	for hour, hs := range f.st.hours {
		if hs.pending > 0 {
			out.Hours = append(out.Hours, HourPending{Hour: hour, Pending: hs.pending})
			out.Pending += hs.pending
		}
	}
	slices.SortFunc(out.Hours, func(a, b HourPending) int { return int(a.Hour - b.Hour) })
	for s, n := range f.st.delayed {
		out.Subjects[s] = n
	}
	return out
}

// PendingHours returns the hours holding delayed messages not yet fired,
// oldest first: a new leader loads those before the current hour (they are
// overdue). Safe on any goroutine.
func (f *FSM) PendingHours() []int64 {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	var out []int64
	for hour, hs := range f.st.hours {
		if hs.pending > 0 {
			out = append(out, hour)
		}
	}
	slices.Sort(out)
	return out
}
