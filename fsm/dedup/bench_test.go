package dedup

import "testing"

// BenchmarkDedupAddLookup: per op, what apply asks the dedup window for one
// new message: expire, look its id up (a miss), add it. The window holds
// 1 M ids (10 minutes at 1,667 msgs/s) and slides as the ops go on.
// reads/op counts the candidates a lookup returned, each a read of the
// message log in apply.
func BenchmarkDedupAddLookup(b *testing.B) {
	const window, n = 600_000, 1_000_000
	d := NewWindow(window)
	fillDedup(d, n, window)
	ids := make([]string, 4096) // built before the timing, reused with fresh numbers
	var buf []byte
	reads := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(ids) == 0 {
			b.StopTimer()
			for j := range ids {
				buf = dedupBenchID(buf, n+i+j)
				ids[j] = string(buf)
			}
			b.StartTimer()
		}
		at := window + int64(i)*window/n
		d.Expire(at)
		reads += len(d.Lookup(ids[i%len(ids)]))
		d.Add(ids[i%len(ids)], at, int64(n+i)*200)
	}
	b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
}

// BenchmarkDedupLookupHit: per op, a lookup of an id the window holds
// (1 M ids), as for a producer's retry.
func BenchmarkDedupLookupHit(b *testing.B) {
	const window, n = 600_000, 1_000_000
	d := NewWindow(window)
	fillDedup(d, n, window)
	ids := make([]string, 4096)
	var buf []byte
	for j := range ids {
		buf = dedupBenchID(buf, j*(n/len(ids)))
		ids[j] = string(buf)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if len(d.Lookup(ids[i%len(ids)])) == 0 {
			b.Fatal("a remembered id was not found")
		}
	}
}
