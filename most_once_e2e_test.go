package qmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/transport"
)

// A backlog larger than one pull reply, drained at most once with the
// defaults, reaches the consumer whole, each message once. A pull used to
// count as consumed every entry it handed out, and its reply carried only
// the 8 MiB that fit: of 64 messages of 256 KiB, 31 arrived; of 12 of
// 1 MiB, 7.
func TestAtMostOnceDeliversABacklogLargerThanAReply(t *testing.T) {
	for _, tc := range []struct{ count, size int }{{64, 256 << 10}, {12, 1 << 20}} {
		t.Run(fmt.Sprintf("%dx%dKiB", tc.count, tc.size>>10), func(t *testing.T) {
			n, p, ctx := brokerAndProducer(t, nil)
			sent := map[string]bool{}
			for range tc.count {
				m := p.GenerateMessage("blobs")
				m.SetBody(make([]byte, tc.size))
				if err := p.SendMessage(ctx, m); err != nil {
					t.Fatal(err)
				}
				sent[m.ID()] = true
			}
			var mu sync.Mutex
			got := map[string]int{}
			s, err := qmq.Subscribe(n.ClientAddr(), "blobs", "g", func(_ context.Context, m *qmq.Message) error {
				mu.Lock()
				got[m.ID()]++
				mu.Unlock()
				return nil
			}, qmq.StartAt(qmq.Earliest), qmq.WithAtMostOnce())
			if err != nil {
				t.Fatal(err)
			}
			// Everything handed out (at most once: consumed), then every
			// message pulled handled.
			id := fsm.ConsumerID{Subject: "blobs", ConsumerGroup: "g", Consumer: s.Consumer()}
			poll.Until(t, 20*time.Second, "the backlog handed out", func() bool {
				return n.FSM().Epoch(id) != 0 && n.FSM().Backlog() == 0
			})
			dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := s.Drain(dctx); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(sent) {
				t.Errorf("%d of %d messages arrived", len(got), len(sent))
			}
			for id, k := range got {
				if !sent[id] || k != 1 {
					t.Errorf("%s arrived %d times (sent: %v)", id, k, sent[id])
				}
			}
		})
	}
}

// A graceful drain waits for a pull under way for as long as the pull
// itself would: at most once, what a pull handed out is consumed, and a
// pull cut short by the drain lost it with nothing failing. (The drain
// gave pulls the pull wait and a second.)
func TestAtMostOnceDrainWaitsForAPullUnderWay(t *testing.T) {
	n, proxy, real := proxiedBroker(t, nil)
	got := make(chan string, 1)
	s, err := qmq.Subscribe(proxy.Addr(), "jobs", "g", func(_ context.Context, m *qmq.Message) error {
		got <- m.ID()
		return nil
	}, qmq.WithAtMostOnce(), qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	id := fsm.ConsumerID{Subject: "jobs", ConsumerGroup: "g", Consumer: s.Consumer()}
	poll.Until(t, 10*time.Second, "the consumer registered", func() bool { return n.FSM().Epoch(id) != 0 })
	// Replies (and requests) through the proxy now take 1.5 s; the message
	// is sent past it, so it is handed out while the drain has begun.
	proxy.SetLatency(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := transport.Dial(ctx, real)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &transport.SendRequest{Messages: []*message.Message{{ID: "job-1", Subject: "jobs", CreatedAt: 1, Body: []byte("x")}}}
	if _, err := conn.Call(ctx, transport.TypeSend, req.Encode()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the message handed out", func() bool { return n.FSM().Backlog() == 0 })
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "job-1" {
			t.Fatalf("got %s", m)
		}
	default:
		t.Fatal("the message handed out to the draining subscription never reached its handler")
	}
}
