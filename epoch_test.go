package qmq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
)

// sendJobs sends n messages of subject "jobs".
func sendJobs(ctx context.Context, t *testing.T, p *qmq.Producer, n int) {
	t.Helper()
	for range n {
		if err := p.SendMessage(ctx, p.GenerateMessage("jobs")); err != nil {
			t.Fatal(err)
		}
	}
}

// A consumer whose session expired is reclaimed and forgotten; pulling
// again under the same name it is a new registration (a new epoch), its
// pull sequences from 0. An ack of what its earlier life pulled names the
// same sequences: it used to acknowledge the new life's messages, which
// then never reached the group. Now it is refused (ErrStaleAck), the new
// life's messages stay unacked, and its own acks work.
func TestStaleAckIsRefused(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, func(c *server.Config) { c.SessionTimeout = 300 * time.Millisecond })
	sendJobs(ctx, t, p, 3)
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.WithConsumerName("c"), qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, err := c.Pull(ctx, 10, time.Second)
	if err != nil || len(first) != 3 {
		t.Fatalf("pull: %d messages, %v", len(first), err)
	}
	id := fsm.ConsumerID{Subject: "jobs", ConsumerGroup: "workers", Consumer: "c"}
	poll.Until(t, 20*time.Second, "the silent consumer reclaimed", func() bool { return n.FSM().Epoch(id) == 0 })

	second, err := c.Pull(ctx, 10, time.Second)
	if err != nil || len(second) != 3 || n.FSM().Epoch(id) < 2 {
		t.Fatalf("pull after the reclaim: %d messages, epoch %d, %v", len(second), n.FSM().Epoch(id), err)
	}
	if err := c.Ack(ctx, first...); !errors.Is(err, qmq.ErrStaleAck) {
		t.Fatalf("ack of the first life's messages: %v, want ErrStaleAck", err)
	}
	if b := n.FSM().Backlog(); b != 3 {
		t.Fatalf("backlog %d after a stale ack, want 3: it acknowledged the second life's messages", b)
	}
	if err := c.Ack(ctx, second...); err != nil {
		t.Fatal(err)
	}
	if b := n.FSM().Backlog(); b != 0 {
		t.Fatalf("backlog %d after the second life's acks, want 0", b)
	}
}

// A subscription whose session expires while its handler runs (the
// broker's session timeout is below the subscription's heartbeat) has its
// ack refused as stale. It drops it — it used to retry it every second
// for ever, its window filling — and handles the message again when it
// comes back, and the group's backlog drains.
func TestSubscriptionDropsStaleAcks(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, func(c *server.Config) { c.SessionTimeout = 300 * time.Millisecond })
	slow := p.GenerateMessage("jobs")
	if err := p.SendMessage(ctx, slow); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	id := fsm.ConsumerID{Subject: "jobs", ConsumerGroup: "workers", Consumer: "sub"}
	sub, err := qmq.Subscribe(n.ClientAddr(), "jobs", "workers", func(_ context.Context, m *qmq.Message) error {
		mu.Lock()
		seen[m.ID()]++
		times := seen[m.ID()]
		mu.Unlock()
		if m.ID() == slow.ID() && times == 1 {
			// Outlive the session: no pull is under way while every worker is busy.
			poll.Until(t, 20*time.Second, "the busy consumer reclaimed", func() bool { return n.FSM().Epoch(id) == 0 })
		}
		return nil
	}, qmq.WithConsumerName("sub"), qmq.StartAt(qmq.Earliest), qmq.WithWorkers(1), qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 5 {
		m := p.GenerateMessage("jobs")
		m.SetInt("n", int64(i))
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 20*time.Second, "every message handled and the backlog drained", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 6 && seen[slow.ID()] >= 2 && n.FSM().Backlog() == 0
	})
}

// A long poll is a sign of life for as long as it waits: a consumer that
// holds messages and waits longer than the session timeout for more keeps
// its session (it used to be refreshed only when the poll began, so the
// consumer was reclaimed in the middle of its own pull).
func TestLongPollKeepsTheSessionAlive(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, func(c *server.Config) { c.SessionTimeout = 300 * time.Millisecond })
	sendJobs(ctx, t, p, 1)
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.WithConsumerName("c"), qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	held, err := c.Pull(ctx, 10, time.Second)
	if err != nil || len(held) != 1 {
		t.Fatalf("pull: %d, %v", len(held), err)
	}
	id := fsm.ConsumerID{Subject: "jobs", ConsumerGroup: "workers", Consumer: "c"}
	epoch := n.FSM().Epoch(id)
	for range 2 {
		if more, err := c.Pull(ctx, 10, 1500*time.Millisecond); err != nil || len(more) != 0 {
			t.Fatalf("a long poll with nothing to deliver: %d messages, %v (the held one came back: the consumer was reclaimed)", len(more), err)
		}
	}
	if now := n.FSM().Epoch(id); now != epoch {
		t.Fatalf("epoch %d after long polls, was %d: the consumer was reclaimed while it polled", now, epoch)
	}
	if err := c.Ack(ctx, held...); err != nil {
		t.Fatal(err)
	}
}
