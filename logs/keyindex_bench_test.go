package logs

import (
	"encoding/binary"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkKeyIndexAppend appends 128-byte messages to a message log of
// 1 MiB segments, flushing every 1000, with the key index on (an Add per
// message, sidecars written at each roll) or off. idx-B/msg is the
// index's size on disk per message of the sealed segments.
//
//	go test ./logs -run '^$' -bench KeyIndexAppend -count 6
func BenchmarkKeyIndexAppend(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run("index="+strconv.FormatBool(on), func(b *testing.B) {
			dir := b.TempDir()
			ml := openMessageLog(b, filepath.Join(dir, "log"), Options{SegmentSize: 1 << 20})
			var ki *KeyIndex
			if on {
				var err error
				ki, err = OpenKeyIndex(ml.Log(), filepath.Join(dir, "index"), func(p []byte, add func(uint64)) {
					add(binary.LittleEndian.Uint64(p[len(p)-8:]))
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			m := sampleMessage(0)
			m.Body = make([]byte, 128)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				m.Index = uint64(i)
				binary.LittleEndian.PutUint64(m.Body[120:], uint64(i)*0x9e3779b97f4a7c15)
				off, _, err := ml.Append(m)
				if err != nil {
					b.Fatal(err)
				}
				if ki != nil {
					ki.Add(off, uint64(i)*0x9e3779b97f4a7c15)
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
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			if ki != nil {
				ki.Close()
				st := ki.Stats()
				if sealed := b.N - st.ActiveEntries; sealed > 0 && st.Segments > 0 {
					b.ReportMetric(float64(st.DiskBytes)/float64(sealed), "idx-B/msg")
				}
				b.ReportMetric(float64(st.MemoryBytes), "idx-mem-B")
			}
		})
	}
}
