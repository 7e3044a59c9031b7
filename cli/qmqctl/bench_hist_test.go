package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistIndexBounds(t *testing.T) {
	for _, v := range []time.Duration{0, 1, 2047, 2048, 2049, 4095, 4096, time.Microsecond, time.Millisecond,
		1234567, time.Second, time.Minute, histMax - 1, histMax} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d, out of 0..%d", v, i, histBuckets-1)
		}
		up := histUpper(i)
		lo := time.Duration(0)
		if i > 0 {
			lo = histUpper(i-1) + 1
		}
		if v < lo || v > up {
			t.Errorf("%d lands in bucket %d = [%d, %d]", v, i, lo, up)
		}
		if v >= histExact && float64(up-lo+1) > float64(v)/histSub {
			t.Errorf("bucket %d of %d is %d wide: more than 1/%d of the value", i, v, up-lo+1, histSub)
		}
	}
	if histIndex(histMax) != histBuckets-1 || histIndex(10*histMax) != histBuckets-1 || histIndex(-5) != 0 {
		t.Error("values beyond the histogram's range are not clamped to its ends")
	}
	// Every bucket follows the one before it.
	for i := 1; i < histBuckets; i++ {
		if histUpper(i) <= histUpper(i-1) || histIndex(histUpper(i)) != i || histIndex(histUpper(i-1)+1) != i {
			t.Fatalf("bucket %d: upper %d after %d", i, histUpper(i), histUpper(i-1))
		}
	}
}

// Against the exact percentiles of the same samples: never low, at most
// 0.1 % high; small values, the mean and the max exact.
func TestHistogramPercentiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h latencyHistogram
	var samples []time.Duration
	for range 100000 {
		d := time.Duration(r.ExpFloat64() * float64(2*time.Millisecond))
		if r.IntN(10) == 0 {
			d = time.Duration(r.IntN(2000)) // some exact ones
		}
		samples = append(samples, d)
		h.add(d)
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	for _, p := range []float64{0.1, 10, 50, 75, 95, 99, 99.9, 99.99, 100} {
		want := percentile(samples, p)
		got := h.percentile(p)
		if got < want || float64(got-want) > float64(want)/histSub {
			t.Errorf("p%v = %v, exact %v", p, got, want)
		}
	}
	if h.percentile(100) != samples[len(samples)-1] || h.mean() != sum/time.Duration(len(samples)) {
		t.Errorf("max %v mean %v, want %v and %v", h.percentile(100), h.mean(), samples[len(samples)-1], sum/time.Duration(len(samples)))
	}
	var empty latencyHistogram
	if empty.percentile(50) != 0 || empty.mean() != 0 {
		t.Error("an empty histogram reports values")
	}
}
