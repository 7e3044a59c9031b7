package delaywheel

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sort"
	"testing"
	"time"
)

const hour = int64(time.Hour / time.Millisecond)

func newWheel(t testing.TB, now int64) *Wheel {
	t.Helper()
	w, err := New(100*time.Millisecond, 2*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestDueIsExactAndNeverEarly adds random entries, then advances the clock
// in random steps: every call returns exactly the entries due by then that
// it has not returned before.
func TestDueIsExactAndNeverEarly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	start := int64(1_800_000_000_123)
	w := newWheel(t, start)
	pending := map[uint64]int64{}
	for i := range 20000 {
		at := start - 5000 + rng.Int64N(2*hour-5000) // some already due
		if err := w.Add(Entry{At: at, Ref: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		pending[uint64(i)] = at
	}
	now := start
	var got []Entry
	for len(pending) > 0 {
		now += rng.Int64N(5 * 60 * 1000)
		got = w.Due(now, got[:0])
		for _, e := range got {
			at, ok := pending[e.Ref]
			switch {
			case !ok:
				t.Fatalf("entry %d returned twice", e.Ref)
			case at > now:
				t.Fatalf("entry %d due at %d returned early, at %d", e.Ref, at, now)
			}
			delete(pending, e.Ref)
		}
		for ref, at := range pending {
			if at <= now {
				t.Fatalf("entry %d due at %d not returned by %d", ref, at, now)
			}
		}
		if w.Len() != len(pending) {
			t.Fatalf("Len %d, %d pending", w.Len(), len(pending))
		}
	}
}

func TestDueWithinASlot(t *testing.T) {
	w := newWheel(t, 1000)
	for _, at := range []int64{1010, 1050, 1099, 1100} {
		w.Add(Entry{At: at, Ref: uint64(at)})
	}
	refs := func(es []Entry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Ref)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	if got := refs(w.Due(1049, nil)); len(got) != 1 || got[0] != 1010 {
		t.Fatalf("due at 1049: %v, want [1010]", got)
	}
	if got := refs(w.Due(1099, nil)); len(got) != 2 || got[0] != 1050 || got[1] != 1099 {
		t.Fatalf("due at 1099: %v, want [1050 1099]", got)
	}
	if got := refs(w.Due(1100, nil)); len(got) != 1 || got[0] != 1100 {
		t.Fatalf("due at 1100: %v, want [1100]", got)
	}
}

func TestHorizonAndClockJumps(t *testing.T) {
	start := int64(10 * hour)
	w := newWheel(t, start)
	if err := w.Add(Entry{At: w.Horizon()}); !errors.Is(err, ErrBeyondHorizon) {
		t.Fatalf("entry at the horizon: %v, want ErrBeyondHorizon", err)
	}
	w.Add(Entry{At: start + hour, Ref: 1})
	w.Add(Entry{At: w.Horizon() - 1, Ref: 2})
	// Time going back changes nothing.
	if got := w.Due(start-hour, nil); len(got) != 0 {
		t.Fatalf("due %v when time went back", got)
	}
	// A jump past the whole span returns everything and re-bases the wheel.
	later := start + 5*hour + 7
	if got := w.Due(later, nil); len(got) != 2 || w.Len() != 0 {
		t.Fatalf("after a jump past the span: %d due, %d left", len(got), w.Len())
	}
	if h := w.Horizon(); h <= later || h > later+2*hour {
		t.Fatalf("horizon %d after the jump to %d", h, later)
	}
	if err := w.Add(Entry{At: later + hour, Ref: 3}); err != nil {
		t.Fatal(err)
	}
	if got := w.Due(later+hour, nil); len(got) != 1 {
		t.Fatalf("after re-basing: %d due, want 1", len(got))
	}
}

func TestNewRefusesBadShapes(t *testing.T) {
	for _, c := range []struct{ tick, span time.Duration }{{0, time.Hour}, {time.Hour, time.Minute}, {300 * time.Millisecond, time.Second}} {
		if _, err := New(c.tick, c.span, 0); err == nil {
			t.Errorf("New(%s, %s) accepted", c.tick, c.span)
		}
	}
}

// BenchmarkWheelMemory reports the heap a wheel holding one million entries
// due within the hour costs per entry (the target is at most 48 bytes).
func BenchmarkWheelMemory(b *testing.B) {
	const n = 1_000_000
	rng := rand.New(rand.NewPCG(3, 4))
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		w := newWheel(b, 0)
		for i := range n {
			w.Add(Entry{At: rng.Int64N(hour), Ref: uint64(i)})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/entry")
		runtime.KeepAlive(w)
	}
}

// BenchmarkWheelAddDue measures adding an entry and taking it out when due.
func BenchmarkWheelAddDue(b *testing.B) {
	w := newWheel(b, 0)
	rng := rand.New(rand.NewPCG(5, 6))
	var due []Entry
	now := int64(0)
	for i := range b.N {
		w.Add(Entry{At: now + rng.Int64N(hour), Ref: uint64(i)})
		if i%1000 == 0 {
			now += 100
			due = w.Due(now, due[:0])
		}
	}
}
