package qmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/transport"
)

// groupCall sends a consumer-group request (JSON) to the broker n and
// decodes its answer into out (if not nil).
func groupCall(t *testing.T, n *server.Node, typ transport.Type, req, out any) {
	t.Helper()
	c, err := transport.NewLeaderClient([]string{n.ClientAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	body, err := c.Call(ctx, typ, b)
	if err != nil {
		t.Fatalf("request %d: %v", typ, err)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("answer to request %d: %v", typ, err)
		}
	}
}

// setRetries creates group of subject at its earliest message with a
// retry backoff of first (doubling to at most first) and maxDeliveries.
func setRetries(t *testing.T, n *server.Node, subject, group string, first time.Duration, maxDeliveries uint32) {
	t.Helper()
	groupCall(t, n, transport.TypeSetConsumerGroup, transport.SetConsumerGroupRequest{Subject: subject, ConsumerGroup: group,
		RetryFirst: &first, RetryMax: &first, MaxDeliveries: &maxDeliveries, Start: transport.StartEarliest}, nil)
}

// deadLetters lists the dead letters of group of subject.
func deadLetters(t *testing.T, n *server.Node, subject, group string) transport.DeadLetterPage {
	t.Helper()
	var page transport.DeadLetterPage
	groupCall(t, n, transport.TypeDeadLetters, transport.DeadLettersRequest{Subject: subject, ConsumerGroup: group}, &page)
	return page
}

// subscribeJobs subscribes h to subject "jobs" as group "workers",
// pulling with a 200 ms wait and logging nothing, and stops the
// subscription when the test ends.
func subscribeJobs(t *testing.T, n *server.Node, h qmq.Handler, opts ...qmq.SubscribeOption) {
	t.Helper()
	opts = append([]qmq.SubscribeOption{qmq.WithPullWait(200 * time.Millisecond), qmq.WithLogger(nil)}, opts...)
	sub, err := qmq.Subscribe(n.ClientAddr(), "jobs", "workers", h, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
}

// deliveryLog records each delivery a handler sees: the message, its
// delivery count and when.
type deliveryLog struct {
	mu   sync.Mutex
	seen []delivery
}

type delivery struct {
	id         string
	deliveries int
	at         time.Time
}

func (l *deliveryLog) add(m *qmq.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, delivery{m.ID(), m.Deliveries(), time.Now()})
}

// of returns the deliveries of id.
func (l *deliveryLog) of(id string) []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []delivery
	for _, d := range l.seen {
		if d.id == id {
			out = append(out, d)
		}
	}
	return out
}

// A handler's error nacks its message to the broker: it comes back after
// the group's backoff, its delivery count one higher, and the worker is
// free meanwhile (a message that always fails used to hold its worker in
// a retry loop, so that nothing sent after it was handled).
func TestHandlerErrorBringsTheMessageBackAfterTheGroupBackoff(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	setRetries(t, n, "jobs", "workers", 100*time.Millisecond, 100)
	poison, flaky, fine := sendTagged(ctx, t, p, "jobs"), sendTagged(ctx, t, p, "jobs"), sendTagged(ctx, t, p, "jobs")
	var log deliveryLog
	subscribeJobs(t, n, func(_ context.Context, m *qmq.Message) error {
		log.add(m)
		switch {
		case m.ID() == poison:
			return errors.New("poison")
		case m.ID() == flaky && m.Deliveries() == 1:
			return errors.New("not yet")
		}
		return nil
	}, qmq.WithWorkers(1))
	poll.Until(t, 20*time.Second, "the flaky message handled on its second delivery, the fine one on its first, the poison one a third time", func() bool {
		return len(log.of(flaky)) == 2 && len(log.of(fine)) == 1 && len(log.of(poison)) >= 3
	})
	for i, d := range log.of(flaky) {
		if d.deliveries != i+1 {
			t.Errorf("the flaky message's delivery %d says Deliveries %d", i+1, d.deliveries)
		}
	}
	for i, d := range log.of(poison) {
		if d.deliveries != i+1 {
			t.Errorf("the poison message's delivery %d says Deliveries %d", i+1, d.deliveries)
		}
	}
}

// A handler's RetryError (wrapped) sets when its message comes again: never
// before, counted from when the handler returned it; the group's own
// backoff (a minute here) does not apply.
func TestRetryAfterIsNeverEarly(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	setRetries(t, n, "jobs", "workers", time.Minute, 100)
	id := sendTagged(ctx, t, p, "jobs")
	const after = 700 * time.Millisecond
	var log deliveryLog
	var mu sync.Mutex
	var nackedAt time.Time
	subscribeJobs(t, n, func(_ context.Context, m *qmq.Message) error {
		log.add(m)
		if m.Deliveries() > 1 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		nackedAt = time.Now()
		return fmt.Errorf("downstream busy: %w", qmq.RetryAfter(after))
	})
	poll.Until(t, 20*time.Second, "the message again", func() bool { return len(log.of(id)) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if again := log.of(id)[1]; again.at.Before(nackedAt.Add(after)) || again.deliveries != 2 {
		t.Fatalf("the message came back %s after its nack (delivery %d), want no sooner than %s, delivery 2",
			again.at.Sub(nackedAt), again.deliveries, after)
	}
}

// Puller.Nack with RetryAt brings a message back no sooner than that time;
// with no RetryError, after the group's backoff.
func TestPullerNack(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	setRetries(t, n, "jobs", "workers", 50*time.Millisecond, 100)
	sendJobs(ctx, t, p, 2)
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := pullN(ctx, t, c, 2, "both messages")
	at := time.Now().Add(600 * time.Millisecond)
	if err := c.Nack(ctx, qmq.RetryAt(at), got[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Nack(ctx, nil, got[1]); err != nil {
		t.Fatal(err)
	}
	back := map[string]time.Time{}
	poll.Until(t, 20*time.Second, "both messages again", func() bool {
		more, err := c.Pull(ctx, 10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range more {
			if m.Deliveries() != 2 {
				t.Errorf("%s back on delivery %d, want 2", m.ID(), m.Deliveries())
			}
			back[m.ID()] = time.Now()
		}
		return len(back) == 2
	})
	if t0 := back[got[0].ID()]; t0.Before(at) {
		t.Fatalf("the message nacked to %s came back %s early", at, at.Sub(t0))
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatalf("ack of messages nacked (ignored by the broker): %v", err)
	}
}

// A message that fails its group's most deliveries becomes a dead letter
// and is not handed out again.
func TestDeadLetterAfterMaxDeliveries(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	setRetries(t, n, "jobs", "workers", 0, 2)
	id := sendTagged(ctx, t, p, "jobs")
	var log deliveryLog
	subscribeJobs(t, n, func(_ context.Context, m *qmq.Message) error {
		log.add(m)
		return errors.New("always fails")
	})
	poll.Until(t, 20*time.Second, "a dead letter", func() bool { return deadLetters(t, n, "jobs", "workers").Total == 1 })
	page := deadLetters(t, n, "jobs", "workers")
	if l := page.Letters[0]; l.ID != id || l.Deliveries != 2 {
		t.Fatalf("dead letter %+v, want %s after 2 deliveries", l, id)
	}
	if seen := log.of(id); len(seen) != 2 || seen[1].deliveries != 2 {
		t.Fatalf("the handler saw %+v, want deliveries 1 and 2", seen)
	}
}
