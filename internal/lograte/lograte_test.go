package lograte

import (
	"testing"
	"time"
)

func TestLimiterAllowsOneLinePerPeriod(t *testing.T) {
	l := New(time.Second)
	at := time.Unix(1000, 0)
	l.now = func() time.Time { return at }
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatalf("first line: ok %v, suppressed %d; want true, 0", ok, n)
	}
	for range 5 {
		if ok, _ := l.Allow(); ok {
			t.Fatal("a second line within the period was allowed")
		}
	}
	at = at.Add(time.Second - time.Nanosecond) // just under the period
	if ok, _ := l.Allow(); ok {
		t.Fatal("a line just under a period later was allowed")
	}
	at = at.Add(time.Nanosecond) // exactly one period after the first
	if ok, n := l.Allow(); !ok || n != 6 {
		t.Fatalf("a period later: ok %v, suppressed %d; want true, 6", ok, n)
	}
	at = at.Add(time.Second)
	if ok, n := l.Allow(); !ok || n != 0 {
		t.Fatalf("next period, nothing held back: ok %v, suppressed %d; want true, 0", ok, n)
	}
}

// TestLimiterBurst: a burst of lines is written whole, then one a period;
// credit saved while quiet never passes the burst.
func TestLimiterBurst(t *testing.T) {
	l := NewBurst(10*time.Millisecond, 3)
	at := time.Unix(1000, 0)
	l.now = func() time.Time { return at }
	for i := range 3 {
		if ok, _ := l.Allow(); !ok {
			t.Fatalf("line %d of a burst of 3 held back", i+1)
		}
	}
	if ok, _ := l.Allow(); ok {
		t.Fatal("a fourth line at once was allowed")
	}
	at = at.Add(10*time.Millisecond - time.Nanosecond)
	if ok, _ := l.Allow(); ok {
		t.Fatal("a line just under a period later was allowed")
	}
	at = at.Add(time.Nanosecond)
	if ok, n := l.Allow(); !ok || n != 2 {
		t.Fatalf("a period later: ok %v, suppressed %d; want true, 2", ok, n)
	}
	at = at.Add(time.Hour) // quiet for long: the burst again, no more
	for i := range 3 {
		if ok, _ := l.Allow(); !ok {
			t.Fatalf("after a quiet hour, line %d of 3 held back", i+1)
		}
	}
	if ok, _ := l.Allow(); ok {
		t.Fatal("after a quiet hour, a fourth line at once was allowed")
	}
}
