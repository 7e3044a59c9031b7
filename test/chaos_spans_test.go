package test

import (
	"testing"
	"time"
)

// TestChaosCleanSeesEveryFault: Clean sees every fault from its start until it healed, and the
// one in flight: a stretch is clean only if none overlaps it.
func TestChaosCleanSeesEveryFault(t *testing.T) {
	ch := NewChaos(t, 1, nil)
	t0 := time.Now()
	if !ch.Clean(t0.Add(-time.Hour), t0) {
		t.Fatal("no fault yet, and not clean")
	}
	ch.begin("kill-leader")
	if ch.Clean(t0.Add(-time.Hour), time.Now()) {
		t.Fatal("clean while a fault is in flight")
	}
	ch.end()
	after := time.Now()
	time.Sleep(time.Millisecond)
	if ch.Clean(t0.Add(-time.Hour), time.Now()) {
		t.Fatal("clean across a fault that has healed")
	}
	if !ch.Clean(after.Add(time.Millisecond), time.Now()) {
		t.Fatal("not clean after the fault healed")
	}
	if !ch.Clean(t0.Add(-time.Hour), t0.Add(-time.Minute)) {
		t.Fatal("not clean before the fault began")
	}
	ran := false
	ch.Between(func() { ran = ch.Clean(after.Add(time.Millisecond), time.Now()) })
	if !ran {
		t.Fatal("Between ran its function with a fault in flight, or not at all")
	}
}

// TestChaosDrawsOnlyReadyKinds: a kind not ready yet is never drawn; with
// none ready, nothing is.
func TestChaosDrawsOnlyReadyKinds(t *testing.T) {
	ch := NewChaos(t, 7, nil)
	ready := false
	kinds := []fault{
		{name: "always", weight: 1},
		{name: "later", weight: 1000, ready: func(*Chaos) bool { return ready }},
	}
	for range 100 {
		if f, ok := ch.draw(kinds); !ok || f.name != "always" {
			t.Fatalf("drew %q (%t) while later is not ready", f.name, ok)
		}
	}
	ready = true
	drawn := map[string]int{}
	for range 100 {
		f, _ := ch.draw(kinds)
		drawn[f.name]++
	}
	if drawn["later"] == 0 {
		t.Fatalf("later never drawn once ready: %v", drawn)
	}
	if _, ok := ch.draw(kinds[1:2:2]); !ok {
		t.Fatal("nothing drawn of a ready kind")
	}
	ready = false
	if f, ok := ch.draw(kinds[1:2:2]); ok {
		t.Fatalf("drew %q with no kind ready", f.name)
	}
}
