package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/wait"
)

// BenchmarkSendDuringSnapshot measures a lone send's latency on a 3-node
// group while another producer holds 2,000 msgs/s over 1,000 subjects and
// every node takes a snapshot every 300 ms or so (its checkpoint covers
// 1,000 consume logs). It reports the p50 and p99 of the sends that
// overlapped a snapshot on some node ("during") and of the others
// ("outside"), from the same run; a snapshot must not stall applies, so
// the two should be close.
//
//	go test ./server -run '^$' -bench SendDuringSnapshot -benchtime 5000x -count 3
func BenchmarkSendDuringSnapshot(b *testing.B) {
	nodes := startGroup(b)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.ClientAddr()
	}
	server := addrs[0] + "," + addrs[1] + "," + addrs[2]
	background, err := qmq.NewProducer(server)
	if err != nil {
		b.Fatal(err)
	}
	defer background.Close()
	lone, err := qmq.NewProducer(server, qmq.WithBatchSize(1))
	if err != nil {
		b.Fatal(err)
	}
	defer lone.Close()
	var failed atomic.Int64
	countFailure := qmq.SendFunc(func(_ *qmq.Message, err error) {
		if err != nil {
			failed.Add(1)
		}
	})
	body := make([]byte, 128)
	const subjects = 1000
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Every subject gets a consume log before the measurement.
	for i := range subjects {
		m := background.GenerateMessage(fmt.Sprintf("snap.%d", i))
		m.SetBody(body)
		background.SendAsync(m, countFailure)
	}
	wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for k := 0; ctx.Err() == nil; k++ {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
			for j := range 2 { // 2,000 msgs/s
				m := background.GenerateMessage(fmt.Sprintf("snap.%d", (2*k+j)%subjects))
				m.SetBody(body)
				background.SendAsync(m, countFailure)
			}
		}
	})
	var snapMu sync.Mutex
	var snapshots []span
	for i, n := range nodes {
		wg.Go(func() {
			pause := 300*time.Millisecond + time.Duration(i)*97*time.Millisecond // staggered
			for wait.Sleep(ctx, pause) {
				start := time.Now()
				err := n.Raft().Snapshot().Error()
				if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && ctx.Err() == nil {
					b.Errorf("%s: snapshot: %v", n.cfg.ID, err)
					return
				}
				if err == nil {
					snapMu.Lock()
					snapshots = append(snapshots, span{start, time.Now()})
					snapMu.Unlock()
				}
			}
		})
	}
	sends := make([]span, 0, b.N)
	b.ResetTimer()
	for range b.N {
		m := lone.GenerateMessage("lone")
		m.SetBody(body)
		t0 := time.Now()
		if err := lone.SendMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
		sends = append(sends, span{t0, time.Now()})
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d background sends failed", n)
	}
	var during, outside []time.Duration
	for _, s := range sends {
		if slices.ContainsFunc(snapshots, s.overlaps) {
			during = append(during, s.to.Sub(s.from))
		} else {
			outside = append(outside, s.to.Sub(s.from))
		}
	}
	report := func(ds []time.Duration, name string) {
		if len(ds) == 0 {
			return // a short run (the first, of one send) may have none
		}
		slices.Sort(ds)
		at := func(p float64) float64 {
			return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds()) / 1000
		}
		b.ReportMetric(at(0.5), "p50-ms-"+name)
		b.ReportMetric(at(0.99), "p99-ms-"+name)
	}
	report(during, "during")
	report(outside, "outside")
	b.ReportMetric(float64(len(during))/float64(len(sends)), "during/op")
	b.ReportMetric(float64(len(snapshots)), "snapshots")
}

// span is an interval of time.
type span struct{ from, to time.Time }

func (s span) overlaps(o span) bool { return s.from.Before(o.to) && o.from.Before(s.to) }
