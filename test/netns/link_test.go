package netns

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The link model, packet by packet, with no device: the delay, the loss
// rate within statistical bounds, a cut link, and the order with and
// without Reorder.
func TestLaneDelay(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(1000, 0)
	l := &lane{Link: Link{Delay: 3 * time.Millisecond}}
	for i := range 100 {
		sent := now.Add(time.Duration(i) * time.Microsecond)
		at, ok := l.pass(sent, 100, rng)
		if !ok || at.Sub(sent) != 3*time.Millisecond {
			t.Fatalf("packet %d: ok %v, delayed %s, want 3ms", i, ok, at.Sub(sent))
		}
	}
}

func TestLaneJitterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1000, 0)
	l := &lane{Link: Link{Delay: 2 * time.Millisecond, Jitter: time.Millisecond, Reorder: true}}
	var lo, hi time.Duration = time.Hour, 0
	for i := range 10000 {
		sent := now.Add(time.Duration(i) * time.Millisecond)
		at, _ := l.pass(sent, 100, rng)
		d := at.Sub(sent)
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < time.Millisecond || hi > 3*time.Millisecond || hi-lo < 1900*time.Microsecond {
		t.Fatalf("delays in [%s, %s], want spread over [1ms, 3ms]", lo, hi)
	}
}

func TestLaneLossRate(t *testing.T) {
	for _, p := range []float64{0, 0.005, 0.1, 0.5} {
		rng := rand.New(rand.NewPCG(5, 6))
		l := &lane{Link: Link{Loss: p}}
		const n = 200000
		lost := 0
		for range n {
			if _, ok := l.pass(time.Unix(0, 0), 100, rng); !ok {
				lost++
			}
		}
		// Six standard deviations of a binomial: a correct model fails
		// this about once in a billion runs.
		sd := math.Sqrt(n * p * (1 - p))
		if got := float64(lost); math.Abs(got-n*p) > 6*sd+1 {
			t.Errorf("loss %v: %d of %d lost, want %.0f ± %.0f", p, lost, n, n*p, 6*sd)
		}
	}
}

func TestLaneDown(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	l := &lane{Link: Link{Down: true}}
	for range 1000 {
		if _, ok := l.pass(time.Unix(0, 0), 100, rng); ok {
			t.Fatal("a packet passed a link that is down")
		}
	}
	l.Down = false
	if _, ok := l.pass(time.Unix(0, 0), 100, rng); !ok {
		t.Fatal("a packet was dropped by a restored link without loss")
	}
}

// inversions counts the packets that arrive before one sent earlier, on a
// lane with jitter far above the gap between packets.
func inversions(reorder bool) int {
	rng := rand.New(rand.NewPCG(9, 10))
	now := time.Unix(1000, 0)
	l := &lane{Link: Link{Delay: 5 * time.Millisecond, Jitter: 2 * time.Millisecond, Reorder: reorder}}
	var last time.Time
	n := 0
	for i := range 1000 {
		at, _ := l.pass(now.Add(time.Duration(i)*10*time.Microsecond), 100, rng)
		if at.Before(last) {
			n++
		}
		last = later(at, last)
	}
	return n
}

func TestLaneReorder(t *testing.T) {
	if n := inversions(false); n != 0 {
		t.Fatalf("without Reorder, %d packets overtook an earlier one", n)
	}
	// Jitter of ±2 ms over packets 10 µs apart: most overtake.
	if n := inversions(true); n < 100 {
		t.Fatalf("with Reorder, only %d of 1000 packets overtook an earlier one", n)
	}
}

func TestLaneRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	now := time.Unix(1000, 0)
	l := &lane{Link: Link{Rate: 1 << 20}} // 1 MiB/s: a 1 KiB packet takes ~977 µs
	var at time.Time
	for range 1024 {
		at, _ = l.pass(now, 1024, rng)
	}
	if d := at.Sub(now); d < 999*time.Millisecond || d > 1001*time.Millisecond {
		t.Fatalf("1 MiB at 1 MiB/s clocked out in %s, want 1s", d)
	}
}
