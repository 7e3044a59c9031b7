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
)

// BenchmarkSendDuringSnapshot measures a lone send's latency on a 3-node
// group while another producer holds 2,000 msgs/s over 1,000 subjects,
// with no snapshot asked for ("quiet") and with every node snapshotting
// back to back ("snapshots": a snapshot's checkpoint covers 1,000 consume
// logs). It reports the sends' p50 and p99 and how many snapshots were
// taken; a snapshot must not stall applies, so the p99s should be close.
//
//	go test ./server -run '^$' -bench SendDuringSnapshot -benchtime 3000x -count 3
func BenchmarkSendDuringSnapshot(b *testing.B) {
	for _, snapshots := range []bool{false, true} {
		name := "quiet"
		if snapshots {
			name = "snapshots"
		}
		b.Run(name, func(b *testing.B) { benchSendDuringSnapshot(b, snapshots) })
	}
}

func benchSendDuringSnapshot(b *testing.B, snapshots bool) {
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
	var taken sync.Map
	if snapshots {
		for _, n := range nodes {
			wg.Go(func() {
				count := 0
				for ctx.Err() == nil {
					err := n.Raft().Snapshot().Error()
					if err == nil {
						count++
					} else if !errors.Is(err, raft.ErrNothingNewToSnapshot) && ctx.Err() == nil {
						b.Errorf("%s: snapshot: %v", n.cfg.ID, err)
						return
					}
				}
				taken.Store(n.cfg.ID, count)
			})
		}
	}
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		m := lone.GenerateMessage("lone")
		m.SetBody(body)
		t0 := time.Now()
		if err := lone.SendMessage(ctx, m); err != nil {
			b.Fatal(err)
		}
		latencies = append(latencies, time.Since(t0))
	}
	b.StopTimer()
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d background sends failed", n)
	}
	slices.Sort(latencies)
	at := func(p float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	total := 0
	taken.Range(func(_, v any) bool { total += v.(int); return true })
	b.ReportMetric(float64(total), "snapshots")
}
