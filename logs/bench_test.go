package logs

import (
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkMessageLogAppend appends messages and flushes every 1000, as the
// state machine does per batch. Bytes are the record bytes written.
func BenchmarkMessageLogAppend(b *testing.B) { benchMessageLogAppend(b, Options{}) }

// BenchmarkMessageLogAppendCached is BenchmarkMessageLogAppend with the
// segment files taken from a cache, as the state machine's are.
func BenchmarkMessageLogAppendCached(b *testing.B) {
	benchMessageLogAppend(b, Options{Files: NewFiles(64)})
}

func benchMessageLogAppend(b *testing.B, opts Options) {
	for _, bc := range []struct {
		name string
		body int
	}{
		{"128B", 128},
		{"1KiB", 1 << 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ml := openMessageLog(b, b.TempDir(), opts)
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
func BenchmarkConsumeLogGet(b *testing.B) { benchConsumeLogGet(b, Options{}) }

// BenchmarkConsumeLogGetCached is BenchmarkConsumeLogGet with the segment
// files taken from a cache: every read hits.
func BenchmarkConsumeLogGetCached(b *testing.B) { benchConsumeLogGet(b, Options{Files: NewFiles(64)}) }

func benchConsumeLogGet(b *testing.B, opts Options) {
	const n = 100_000
	c := openConsumeLog(b, b.TempDir(), opts)
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
func BenchmarkConsumeLogAppend(b *testing.B) { benchConsumeLogAppend(b, Options{}) }

// BenchmarkConsumeLogAppendCached is BenchmarkConsumeLogAppend with the
// segment files taken from a cache.
func BenchmarkConsumeLogAppendCached(b *testing.B) {
	benchConsumeLogAppend(b, Options{Files: NewFiles(64)})
}

func benchConsumeLogAppend(b *testing.B, opts Options) {
	c := openConsumeLog(b, b.TempDir(), opts)
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

// BenchmarkConsumeLogGetMisses reads one entry of a random one of 256
// consume logs sharing a cache of 16 files: nearly every read misses, so it
// measures an open and a close (of a clean file) per read.
func BenchmarkConsumeLogGetMisses(b *testing.B) {
	files := NewFiles(16)
	dir := b.TempDir()
	cls := make([]*ConsumeLog, 256)
	for i := range cls {
		cls[i] = openConsumeLog(b, filepath.Join(dir, strconv.Itoa(i)), Options{Files: files})
		for j := range 10 {
			if _, err := cls[i].Append(consumeEntry(j)); err != nil {
				b.Fatal(err)
			}
		}
		if err := cls[i].Log().Sync(); err != nil {
			b.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		seq := rng.Int64N(10)
		if e, err := cls[rng.IntN(len(cls))].Get(seq); err != nil || e.Offset != seq*1000 {
			b.Fatalf("Get(%d) = %+v, %v", seq, e, err)
		}
	}
}
