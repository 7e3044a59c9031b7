package main

import (
	"context"
	"fmt"
	"net"
	"time"
)

// system is one queue under test: a fresh three-node cluster each round,
// and the measurements the table needs.
type system interface {
	name() string
	// start starts a fresh cluster with its data under dir; stop stops
	// every process of it by PID.
	start(ctx context.Context, dir string) error
	stop()
	pids() []int
	dataDirs() []string
	// asyncPublish sends count messages of size bytes with 1,000 in
	// flight; it returns msgs/s.
	asyncPublish(ctx context.Context, size, count int) (float64, error)
	// syncPublish sends size-byte messages one at a time for about d (or n
	// messages where the tool counts); it returns msgs/s and the median
	// latency in ms.
	syncPublish(ctx context.Context, size int, d time.Duration, n int) (rate, p50 float64, err error)
	// drain stores count messages, then consumes them with acks; it
	// returns the consumer's msgs/s.
	drain(ctx context.Context, size, count int) (float64, error)
	// e2e sends size-byte messages at rate for d with one consumer running,
	// and returns the latency from send call to receipt.
	e2e(ctx context.Context, size, rate int, d time.Duration) (e2eFigures, error)
}

// e2eFigures is a fixed-rate run with a consumer.
type e2eFigures struct {
	asked, achieved     float64 // msgs/s
	sent, received      int64
	p50, p99, p999, max float64 // ms, send call to receipt
}

// keptUp says whether the consumer kept up with the rate: the producer
// held at least 95 % of it, the consumer received every message, and
// the 99th percentile stayed under keepUpP99 ms (a consumer falling
// behind sees its latency grow through the run).
func (f e2eFigures) keptUp() bool {
	return f.achieved >= 0.95*f.asked && f.received >= f.sent && f.sent > 0 && f.p99 <= keepUpP99
}

// complete says why a run's latency cannot stand for it: nothing sent, or
// messages the consumer had not received when it was stopped (their
// latency, the longest, would be missing).
func (f e2eFigures) complete() error {
	if f.sent == 0 || f.received < f.sent {
		return fmt.Errorf("the consumer received %d of the %d messages sent", f.received, f.sent)
	}
	return nil
}

// keepUpP99 is the latency above which a consumer is taken to have fallen
// behind, in ms.
const keepUpP99 = 250

// freePorts returns n distinct free TCP ports on 127.0.0.1 (free when
// asked: another process could take one before it is used).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("a free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// waitFor polls cond every 100 ms until it returns nil, for at most d.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
