package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
)

// BenchmarkCheckpoint: per op, one Append of a message to each of N
// subjects (so that every log is written since the last checkpoint), then
// a snapshot. snapshot-ms is the time of Snapshot, which the apply
// goroutine waits for; persist-ms that of Persist, which Raft runs on a
// goroutine of its own while applies go on.
func BenchmarkCheckpoint(b *testing.B) {
	for _, subjects := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("subjects=%d", subjects), func(b *testing.B) {
			f := unitOpen(b, DefaultConfig(b.TempDir()))
			var snapshotTime, persistTime time.Duration
			for i := 0; i < b.N; i++ {
				msgs := make([]*message.Message, subjects)
				for s := range msgs {
					msgs[s] = &message.Message{ID: fmt.Sprintf("c%d-%d", i, s), Subject: fmt.Sprintf("s%d", s), Body: make([]byte, 128)}
				}
				f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: (&Append{Now: int64(i + 1), Messages: msgs}).Encode()})
				start := time.Now()
				snap, err := f.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				snapshotTime += time.Since(start)
				start = time.Now()
				var sink unitSink
				if err := snap.Persist(&sink); err != nil {
					b.Fatal(err)
				}
				persistTime += time.Since(start)
				snap.Release()
			}
			b.ReportMetric(float64(snapshotTime.Microseconds())/1e3/float64(b.N), "snapshot-ms")
			b.ReportMetric(float64(persistTime.Microseconds())/1e3/float64(b.N), "persist-ms")
		})
	}
}
