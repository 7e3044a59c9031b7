package server

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// BenchmarkHeldMessagesMemory measures the heap a one-node group keeps
// per message after 1,000,000 sends (live heap after a GC, less the heap
// before): ordinary messages, delayed ones due within the hour (the
// leader's wheel holds them), and delayed ones due after the next hour
// (only the schedule log on disk holds them). Every case also holds what
// any send leaves behind: the Raft log cache's last 1,024 entries and the
// dedup window. Run with -benchtime 1x.
func BenchmarkHeldMessagesMemory(b *testing.B) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // 0: ordinary
	}{
		{"ordinary", 0},
		{"due-within-the-hour", 20 * time.Minute},
		{"due-after-the-next-hour", 3 * time.Hour},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const total = 1_000_000
			n := startNode(b, "n1", true, nil)
			waitFor(b, 10*time.Second, "leadership", n.isLeader)
			p, err := qmq.NewProducer(n.ClientAddr())
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			before := liveHeap()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			done := make(chan error, total)
			for i := range total {
				m := p.GenerateMessage("held")
				m.SetBody(make([]byte, 128))
				if tc.delay > 0 {
					m.SetDeliverAt(start.Add(tc.delay + time.Duration(i)*time.Millisecond)) // spread over 17 minutes
				}
				p.SendAsync(m, qmq.SendFunc(func(_ *qmq.Message, err error) { done <- err }))
			}
			for range total {
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			if err := ctx.Err(); err != nil {
				b.Fatal(err)
			}
			time.Sleep(2 * delayPoll) // the wheel takes what the inbox holds
			b.ReportMetric(float64(liveHeap()-before)/total, "heap-B/msg")
			p.Close()
			n.Close() // before the next run measures its baseline
		})
	}
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
