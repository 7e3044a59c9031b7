package logs

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMessageLogAppend appends messages and flushes every 1000, as the
// state machine does per batch. Bytes are the record bytes written.
func BenchmarkMessageLogAppend(b *testing.B) {
	for _, bc := range []struct {
		name string
		body int
	}{
		{"128B", 128},
		{"1KiB", 1 << 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ml := openMessageLog(b, b.TempDir(), Options{})
			m := sampleMessage(0)
			m.Body = make([]byte, bc.body)
			b.SetBytes(int64(RecordSize(len(m.AppendEncoded(nil)))))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				m.Index = uint64(i)
				if _, _, err := ml.Append(m); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 999 {
					if err := ml.Log().Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := ml.Log().Flush(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkConsumeLogGet looks up random sequences in a log of 1e5 entries.
func BenchmarkConsumeLogGet(b *testing.B) {
	const n = 100_000
	c := openConsumeLog(b, b.TempDir(), Options{})
	for i := range n {
		if _, err := c.Append(consumeEntry(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.Log().Flush(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		seq := rng.Int64N(n)
		if e, err := c.Get(seq); err != nil || e.Offset != seq*1000 {
			b.Fatalf("Get(%d) = %+v, %v", seq, e, err)
		}
	}
}

// BenchmarkConsumeLogAppend appends entries, flushing every 1000.
func BenchmarkConsumeLogAppend(b *testing.B) {
	c := openConsumeLog(b, b.TempDir(), Options{})
	b.SetBytes(ConsumeRecordSize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.Append(consumeEntry(i)); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := c.Log().Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := c.Log().Flush(); err != nil {
		b.Fatal(err)
	}
}
