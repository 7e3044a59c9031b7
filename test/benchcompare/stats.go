package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// percentile is the nearest-rank p-th percentile of sorted samples (as
// qmqctl bench computes it); zero for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if exact := math.Round(p / 100 * float64(n)); math.Abs(exact-p/100*float64(n)) < 1e-9 {
		rank = int(exact)
	}
	return sorted[min(max(rank, 1), n)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of the values (the mean of the middle two for an even count);
// NaN for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pacer spreads sends evenly at a rate: the k-th is due k/rate after the
// start, and one more than 10 ms late makes the schedule slip rather than
// burst (as qmqctl bench produce --rate).
type pacer struct {
	mu       sync.Mutex
	start    time.Time
	interval float64 // ns
	next     float64 // ns after start
}

func newPacer(rate float64, start time.Time) *pacer {
	return &pacer{start: start, interval: 1e9 / rate}
}

// wait sleeps until the next slot; false if ctx ended first.
func (p *pacer) wait(ctx context.Context) bool {
	p.mu.Lock()
	at := float64(time.Since(p.start))
	if at-p.next > float64(10*time.Millisecond) {
		p.next = at - float64(10*time.Millisecond)
	}
	due := p.next
	p.next += p.interval
	p.mu.Unlock()
	d := time.Duration(due - at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
