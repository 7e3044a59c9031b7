package fsm

import (
	"runtime"
	"strconv"
	"testing"
)

// BenchmarkDedupMemory reports the heap the dedup window holds per id.
func BenchmarkDedupMemory(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		d := newDedup(600_000)
		for i := range n {
			d.add("261129.234310.887.4546d5830761."+strconv.Itoa(i), int64(i), seen{offset: int64(i) * 200, size: 200})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/id")
		runtime.KeepAlive(d)
	}
}
