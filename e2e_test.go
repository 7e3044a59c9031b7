package qmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/testcluster"
)

func TestSendAndSubscribe(t *testing.T) {
	n := testcluster.Broker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const total = 500
	sent := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range total {
		m := p.GenerateMessage("orders.created")
		m.SetInt("n", int64(i))
		m.SetBool("even", i%2 == 0)
		m.SetBody([]byte("hello"))
		sent[m.ID()] = true
		wg.Add(1)
		if i%2 == 0 {
			go func() {
				defer wg.Done()
				if err := p.SendMessage(ctx, m); err != nil {
					t.Errorf("send: %v", err)
				}
			}()
		} else {
			p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
				defer wg.Done()
				if err != nil {
					t.Errorf("async send: %v", err)
				}
			}))
		}
	}
	wg.Wait()

	// Two groups each get every message; two consumers in one group share them.
	got := map[string]map[string]int{"billing": {}, "audit": {}}
	done := make(chan struct{}, 1)
	handler := func(group string) qmq.Handler {
		return func(_ context.Context, m *qmq.Message) error {
			if _, err := m.Int("n"); err != nil {
				t.Errorf("property n: %v", err)
			}
			mu.Lock()
			got[group][m.ID()]++
			if len(got["billing"]) == total && len(got["audit"]) == total {
				select {
				case done <- struct{}{}:
				default:
				}
			}
			mu.Unlock()
			return nil
		}
	}
	var subs []*qmq.Subscription
	for _, group := range []string{"billing", "billing", "audit"} {
		s, err := qmq.Subscribe(n.ClientAddr(), "orders.created", group, handler(group), qmq.StartAt(qmq.Earliest), qmq.WithWorkers(3), qmq.WithPullWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("not every message arrived: billing %d, audit %d of %d", len(got["billing"]), len(got["audit"]), total)
	}
	for _, s := range subs {
		s.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	for group, ids := range got {
		for id, count := range ids {
			if !sent[id] {
				t.Errorf("%s received %s, which was never sent", group, id)
			}
			if count != 1 {
				t.Errorf("%s received %s %d times", group, id, count)
			}
		}
	}
}

func TestPullerAckAndReclaim(t *testing.T) {
	n := testcluster.Broker(t, func(c *server.Config) { c.SessionTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		if err := p.SendMessage(ctx, p.GenerateMessage("jobs")); err != nil {
			t.Fatal(err)
		}
	}
	a, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	msgs, err := a.Pull(ctx, 10, time.Second)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("pull: %d messages, %v", len(msgs), err)
	}
	if err := a.Ack(ctx, msgs[1]); err != nil {
		t.Fatal(err)
	}
	// a goes silent: after its session expires, b receives the two it never acked.
	b, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var again []*qmq.Message
	for len(again) < 2 && ctx.Err() == nil {
		more, err := b.Pull(ctx, 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, more...)
	}
	if len(again) != 2 || again[0].ID() != msgs[0].ID() || again[1].ID() != msgs[2].ID() {
		t.Fatalf("redelivered %v, want the unacked %s and %s", ids(again), msgs[0].ID(), msgs[2].ID())
	}
}

func ids(msgs []*qmq.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID()
	}
	return out
}

// Messages near the size limit, sent together, must not make a request or
// a pull reply exceed the frame limit.
func TestLargeMessagesTravelInBoundedFrames(t *testing.T) {
	n := testcluster.Broker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var wg sync.WaitGroup
	for i := range 6 {
		m := p.GenerateMessage("blobs")
		m.SetBody(make([]byte, 3<<20+i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.SendMessage(ctx, m); err != nil {
				t.Errorf("send of a 3 MiB message: %v", err)
			}
		}()
	}
	wg.Wait()
	c, err := qmq.NewPuller(n.ClientAddr(), "blobs", "g", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := 0
	for got < 6 && ctx.Err() == nil {
		msgs, err := c.Pull(ctx, 100, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 6 {
			t.Fatal("one reply carried 18 MiB of messages")
		}
		got += len(msgs)
		if err := c.Ack(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	if got != 6 {
		t.Fatalf("consumed %d of 6", got)
	}
}
