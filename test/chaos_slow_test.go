package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// The chaos run's slow consumer: slowGroup's two workers take slowHandler
// over each message of slowSubject, and the group's ack wait is
// slowAckWait, so a burst of 12–20 messages takes them 6–10 s, longer than
// the ack wait. A subscription that pulled the whole burst at once (a
// pull asked for 64 per broker group) left its tail waiting in the client
// past its ack wait: handed out again and handled twice, with nothing
// failing (here the 11th message on: it waits 5 s for a worker). It must
// pull only what its workers can start in time. A message pulled as its
// worker frees has the ack wait less the handler's second to reach its
// ack's commit: the pull's reply, the ack's batching and its Raft entry.
// At a 3 s ack wait that margin, 2 s, was overrun under CI's load (two
// cores under the race detector) with nothing over-pulled; at 5 s it is
// 4 s.
//
// Every 10–20 s a producer sends a burst while the subscription runs, and
// waits until slowGroup got every acknowledged send of it; every third
// burst, and the last, is sent and worked through between two faults
// (Chaos.Between). A burst with no fault in flight must reach the handler
// once per message (History.Paced); the others are only counted.
const (
	slowSubject = "reports"
	slowGroup   = "slow"
	slowHandler = time.Second
	slowAckWait = 5 * time.Second
	slowHold    = time.Minute
)

// slowHandlerOf is slowGroup's handler: it takes slowHandler, and records
// the message in h (a failure if its context ended first).
func slowHandlerOf(h *History) qmq.Handler {
	return func(ctx context.Context, m *qmq.Message) error {
		timer := time.NewTimer(slowHandler)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			h.Nacked(slowGroup, m, time.Now())
			return ctx.Err()
		case <-timer.C:
		}
		h.Delivered(slowGroup, m, time.Now())
		return nil
	}
}

// paceBursts sends a burst to slowSubject every 10–20 s until stop, and
// once more after stop, and waits until slowGroup worked through it (each
// acknowledged send handled, and nothing owed in any broker group: every
// ack applied), recording each in h (History.Paced), clean if ch says no
// fault was in flight from its first send until then. admin reads the
// group's figures.
func paceBursts(t *testing.T, h *History, ch *Chaos, adm *admin.Client, servers string, conn qmq.ConnOption, seed uint64, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, conn, qmq.WithSendTimeout(30*time.Second))
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 19))
	bursts(ch, rng, slowHold, stop, func(within time.Duration) bool {
		var ids []string
		from := time.Now()
		for range 12 + rng.IntN(9) {
			m := p.GenerateMessage(slowSubject)
			h.Sending(m)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			h.Sent(m, p.SendMessage(ctx, m))
			cancel()
			ids = append(ids, m.ID())
		}
		if err := Poll(within, func() error {
			if got, want := h.deliveredOf(slowGroup, ids); got < want {
				return fmt.Errorf("%d of %d handled", got, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			v, err := adm.ConsumerGroup(ctx, slowSubject, slowGroup)
			if err != nil {
				return err
			}
			if v.Total.Lag > 0 {
				return fmt.Errorf("%s owes %d", slowGroup, v.Total.Lag)
			}
			return nil
		}); err != nil {
			t.Logf("chaos: a burst of %d messages of %s not worked through: %v", len(ids), slowSubject, err)
		}
		h.Paced(slowGroup, ids, ch.Clean(from, time.Now()))
		return true
	})
}
