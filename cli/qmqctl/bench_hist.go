package main

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Long runs (bench omb) count latencies in a histogram instead of keeping
// every sample: a fixed 256 KiB however long the run, with every bucket
// at most 1/1024 of its value wide, so a percentile reads at most 0.1 %
// high (never low). Durations under histExact nanoseconds are counted
// exactly; above histMax they are counted as histMax. Buckets:
//
//	index 0 … 2047           one per nanosecond: 0 … 2047 ns
//	index 2048 + (s-1)×1024 + (m-1024), s = 1 … 30, m = 1024 … 2047:
//	                         the values m<<s … (m+1)<<s - 1
//
// so for a value v ≥ 2048 with bit length L, s = L-11 and m = v>>s.
const (
	histSubBits = 10
	histSub     = 1 << histSubBits // buckets per power of two
	histExact   = 2 * histSub      // values below this have a bucket each
	histShifts  = 30               // powers of two above histExact: up to 2^41 ns (36 min)
	histBuckets = histExact + histShifts*histSub
	histMax     = time.Duration(1)<<(histSubBits+1+histShifts) - 1
)

// latencyHistogram counts durations; safe for concurrent use.
type latencyHistogram struct {
	counts [histBuckets]atomic.Uint64
	n      atomic.Int64
	sum    atomic.Int64 // nanoseconds (292 years of sum fit)
	max    atomic.Int64
}

func histIndex(d time.Duration) int {
	v := uint64(max(min(d, histMax), 0))
	if v < histExact {
		return int(v)
	}
	s := bits.Len64(v) - (histSubBits + 1)
	return histExact + (s-1)*histSub + int(v>>s) - histSub
}

// histUpper is the largest value bucket i counts.
func histUpper(i int) time.Duration {
	if i < histExact {
		return time.Duration(i)
	}
	s := (i-histExact)/histSub + 1
	m := (i-histExact)%histSub + histSub
	return time.Duration((uint64(m+1) << s) - 1)
}

func (h *latencyHistogram) add(d time.Duration) {
	d = max(d, 0)
	h.counts[histIndex(d)].Add(1)
	h.n.Add(1)
	h.sum.Add(int64(d))
	for {
		old := h.max.Load()
		if int64(d) <= old || h.max.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 100), as
// the upper bound of its bucket, never above the largest value counted.
// Zero for no values.
func (h *latencyHistogram) percentile(p float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	want := int64(math.Ceil(p / 100 * float64(n)))
	if exact := math.Round(p / 100 * float64(n)); math.Abs(exact-p/100*float64(n)) < 1e-9 {
		want = int64(exact)
	}
	want = min(max(want, 1), n)
	var seen int64
	for i := range h.counts {
		seen += int64(h.counts[i].Load())
		if seen >= want {
			return min(histUpper(i), time.Duration(h.max.Load()))
		}
	}
	return time.Duration(h.max.Load())
}

func (h *latencyHistogram) mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / n)
}
