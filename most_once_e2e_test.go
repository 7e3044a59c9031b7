package qmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/await"
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
			id := fsm.ConsumerID{Subject: "blobs", Group: "g", Consumer: s.Consumer()}
			await.True(t, 20*time.Second, "the backlog handed out", func() bool {
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
