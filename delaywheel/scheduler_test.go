package delaywheel

import (
	"slices"
	"testing"
)

// hoursSource is a Source over entries kept in memory, by hour.
type hoursSource map[int64][]Entry

func (h hoursSource) Load(hour int64, fn func(Entry) error) error {
	for _, e := range h[hour] {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (h hoursSource) add(at int64, ref uint64) {
	h[Hour(at)] = append(h[Hour(at)], Entry{At: at, Ref: ref})
}

// TestSchedulerFiresAcrossHours runs a scheduler from an overdue hour through
// three hour boundaries: every entry comes out once, never early, and no
// hour is loaded before it is near.
func TestSchedulerFiresAcrossHours(t *testing.T) {
	start := int64(493_000) * HourMillis
	src := hoursSource{}
	src.add(start-HourMillis+10, 1)          // overdue: the last leader did not fire it
	src.add(start+5, 2)                      // this hour
	src.add(start+HourMillis-1, 3)           // the last millisecond of this hour
	src.add(start+HourMillis, 4)             // the first of the next
	src.add(start+2*HourMillis+30*60_000, 5) // two hours on: loaded later
	src.add(start+3*HourMillis+1, 6)
	s, err := NewScheduler(src, start, []int64{Hour(start) - 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending() != 4 {
		t.Fatalf("%d entries loaded at the start, want 4 (the overdue, this and the next hour)", s.Pending())
	}
	fired := map[uint64]int64{}
	for now := start; now <= start+4*HourMillis; now += 100 {
		due, err := s.Due(now, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range due {
			if _, again := fired[e.Ref]; again {
				t.Fatalf("entry %d fired twice", e.Ref)
			}
			if e.At > now {
				t.Fatalf("entry %d due at %d fired early at %d", e.Ref, e.At, now)
			}
			if now-e.At >= 100 && e.At >= start {
				t.Fatalf("entry %d due at %d fired late at %d", e.Ref, e.At, now)
			}
			fired[e.Ref] = now
		}
	}
	var got []uint64
	for ref := range fired {
		got = append(got, ref)
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("fired %v, want all six", got)
	}
}

// TestSchedulerAddKeepsOnlyWhatFits: an entry scheduled while leading goes
// into the wheel if its hour is loaded, else waits for its hour's load.
func TestSchedulerAddKeepsOnlyWhatFits(t *testing.T) {
	start := int64(493_000) * HourMillis
	src := hoursSource{}
	s, err := NewScheduler(src, start, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Add(Entry{At: start + HourMillis + 1, Ref: 1})   // next hour: in the wheel
	s.Add(Entry{At: start + 2*HourMillis + 1, Ref: 2}) // later: left to its hour
	s.Add(Entry{At: start - 1, Ref: 3})                // a retry of an overdue one
	if s.Pending() != 2 {
		t.Fatalf("%d pending, want 2", s.Pending())
	}
	due, _ := s.Due(start, nil)
	if len(due) != 1 || due[0].Ref != 3 {
		t.Fatalf("due %v, want the overdue retry", due)
	}
}

// TestSchedulerAfterAClockJump: time that jumps hours ahead loads every
// hour passed over and returns their entries from the same call.
func TestSchedulerAfterAClockJump(t *testing.T) {
	start := int64(493_000) * HourMillis
	src := hoursSource{}
	for i := range 5 {
		src.add(start+int64(i)*HourMillis+7, uint64(i))
	}
	s, err := NewScheduler(src, start, nil)
	if err != nil {
		t.Fatal(err)
	}
	due, err := s.Due(start+4*HourMillis+10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 5 {
		t.Fatalf("%d due after a four-hour jump, want all 5", len(due))
	}
}

// TestSchedulerOverTheScheduleLog: a scheduler fed by the schedule log
// fires exactly the entries not yet dispatched.
func TestSchedulerOverTheScheduleLog(t *testing.T) {
	sch := openSchedule(t, t.TempDir(), 4)
	start := int64(493_000) * HourMillis
	var refs []uint64
	for i, id := range []string{"a", "b", "c", "d"} {
		ref, err := sch.Append(start+int64(i)*HourMillis/2, msg(id))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	sch.Flush()
	sch.Dispatch(refs[1]) // b was fired by an earlier leader
	sch.Flush()
	s, err := NewScheduler(sch, start, nil)
	if err != nil {
		t.Fatal(err)
	}
	due, err := s.Due(start+2*HourMillis, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range due {
		_, m, err := sch.Read(e.Ref)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"a", "c", "d"}) {
		t.Fatalf("fired %v, want a, c and d", ids)
	}
}
