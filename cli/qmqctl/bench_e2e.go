package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq"
)

// stampSize is the part of a message body that carries its send time, in
// runs that measure end-to-end latency (bench produce --consume, bench
// omb). The layout of such a body:
//
//	0                          8                               size
//	+--------------------------+-------------------------------+
//	| send time: Unix ns,      | filler ('a' … 'z' repeating,  |
//	| int64 big-endian         |  or random bytes)             |
//	+--------------------------+-------------------------------+
//
// The time is taken just before the send call, with nanoseconds, so the
// latency is exact where CreatedAt (stored in milliseconds) is not.
const stampSize = 8

// stampBody writes t into b's first stampSize bytes; b must be that long.
func stampBody(b []byte, t time.Time) {
	binary.BigEndian.PutUint64(b[:stampSize], uint64(t.UnixNano()))
}

// bodyStamp reads the send time a body carries; false if the body is too
// short to hold one.
func bodyStamp(b []byte) (time.Time, bool) {
	if len(b) < stampSize {
		return time.Time{}, false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[:stampSize]))), true
}

// stallClock finds the longest stretch of a run with no event in it (an
// event: a send acknowledged, or a message received). Events may come
// from any goroutine, in any order. The zero value is not usable: call
// newStallClock.
type stallClock struct {
	start time.Time
	last  atomic.Int64 // nanoseconds after start: the latest event
	max   atomic.Int64 // nanoseconds: the longest gap seen
}

func newStallClock(start time.Time) *stallClock { return &stallClock{start: start} }

// event records an event at now.
func (s *stallClock) event(now time.Time) {
	at := int64(now.Sub(s.start))
	for {
		prev := s.last.Load()
		if at <= prev {
			return // a later event was already recorded: this one ends no gap
		}
		if s.last.CompareAndSwap(prev, at) {
			s.raise(at - prev)
			return
		}
	}
}

func (s *stallClock) raise(gap int64) {
	for {
		old := s.max.Load()
		if gap <= old || s.max.CompareAndSwap(old, gap) {
			return
		}
	}
}

// longest returns the longest gap between the start, the events and end
// (a stretch after the last event counts up to end).
func (s *stallClock) longest(end time.Time) time.Duration {
	if tail := int64(end.Sub(s.start)) - s.last.Load(); tail > 0 {
		s.raise(tail)
	}
	return time.Duration(s.max.Load())
}

// e2eConsumer receives a run's messages as one consumer group, with
// subscriptions on every subject, and hands each stamped message's
// latency (send call to handler) to a callback.
type e2eConsumer struct {
	subs     []*qmq.Subscription
	stall    atomic.Pointer[stallClock] // set once the producers start
	received atomic.Int64               // messages sent in this run, received
	stale    atomic.Int64               // messages without a stamp from this run: older ones, or others'
}

// e2eConfig says what an e2eConsumer consumes and what it tells.
type e2eConfig struct {
	server    string
	conn      qmq.ConnOption
	subjects  []string
	group     string
	consumers int                             // subscriptions per subject
	start     time.Time                       // messages stamped before it are not this run's
	latency   func(d time.Duration, size int) // called for every message of the run, from handler goroutines
}

// startE2E subscribes before the run sends anything; the run then hands
// the consumer its stall clock (setStall) as it starts sending. The group starts at
// the subject's earliest message, so nothing sent before its first pull
// is missed; messages older than the run are counted stale and acked.
func startE2E(cfg e2eConfig) (*e2eConsumer, error) {
	c := &e2eConsumer{}
	handler := func(_ context.Context, m *qmq.Message) error {
		now := time.Now()
		sent, ok := bodyStamp(m.Body())
		if !ok || sent.Before(cfg.start) || sent.After(now) {
			c.stale.Add(1)
			return nil
		}
		if s := c.stall.Load(); s != nil {
			s.event(now)
		}
		cfg.latency(now.Sub(sent), len(m.Body()))
		c.received.Add(1)
		return nil
	}
	for _, subject := range cfg.subjects {
		for range cfg.consumers {
			sub, err := qmq.Subscribe(cfg.server, subject, cfg.group, handler, cfg.conn, qmq.StartAt(qmq.Earliest),
				qmq.WithWorkers(4), qmq.WithPullBatch(1000), qmq.WithPullWait(500*time.Millisecond))
			if err != nil {
				c.stop()
				return nil, fmt.Errorf("consume %s as %s: %w", subject, cfg.group, err)
			}
			c.subs = append(c.subs, sub)
		}
	}
	return c, nil
}

// setStall makes every receipt from now on an event of s.
func (c *e2eConsumer) setStall(s *stallClock) { c.stall.Store(s) }

// await waits until the consumer has received want messages of the run,
// or for at most d; it reports whether it got them all.
func (c *e2eConsumer) await(ctx context.Context, want int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for c.received.Load() < want {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// stop drains every subscription at once (their acks are sent), for at
// most 10 s.
func (c *e2eConsumer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range c.subs {
		wg.Go(func() { _ = s.Drain(ctx) })
	}
	wg.Wait()
}
