package dedup

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// dedupBenchID returns the i-th id of the dedup benchmarks, shaped like the
// SDK's ids.
func dedupBenchID(buf []byte, i int) []byte {
	return strconv.AppendInt(append(buf[:0], "261129.234310.887.4546d5830761."...), int64(i), 10)
}

// fillDedup adds n ids to d, spread evenly over its window and expiring
// as apply does, so that every id is remembered at the end. It returns the
// longest single add.
func fillDedup(d *Window, n int, window int64) time.Duration {
	var buf []byte
	var worst time.Duration
	for i := range n {
		buf = dedupBenchID(buf, i)
		id := string(buf)
		at := int64(i) * window / int64(n)
		start := time.Now()
		d.Expire(at)
		d.Add(id, at, int64(i)*200)
		worst = max(worst, time.Since(start))
	}
	return worst
}

// BenchmarkDedupMemory reports the heap the dedup window holds per id
// (heap in use after a GC, less what was in use before), with n ids appended
// within one 10-minute window, and the longest single add (its expiry
// included) while filling it.
func BenchmarkDedupMemory(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		b.Run("ids="+strconv.Itoa(n/1_000_000)+"M", func(b *testing.B) {
			for range b.N {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				const window = 600_000
				d := NewWindow(window)
				worst := fillDedup(d, n, window)
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/id")
				b.ReportMetric(float64(worst.Microseconds()), "worst-add-µs")
				runtime.KeepAlive(d)
			}
		})
	}
}

// The window holds at most 16 bytes of heap per remembered id, its tables'
// slack and a bucket that outgrew its first table included: 1 M ids over
// one window.
func TestDedupHoldsAtMost16BytesPerID(t *testing.T) {
	const n, window = 1_000_000, 600_000
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d := NewWindow(window)
	fillDedup(d, n, window)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if perID := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n; perID > 16 {
		t.Fatalf("the window holds %.1f bytes per id, want at most 16", perID)
	}
	runtime.KeepAlive(d)
}
