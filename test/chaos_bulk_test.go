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

// The chaos run's backlogs of large messages, drained at most once: every
// 10–20 s a producer sends a burst of 100–180 messages of 256 KiB
// (25–45 MiB, about half in each broker group of the subject: one to
// three times the 8 MiB a pull reply carries) while no consumer of
// bulkGroup runs; then a subscription with the SDK's defaults (at most
// once) drains the backlog and closes. A pull used to count as consumed everything it handed out
// and send only what fit in its reply: about half of each such backlog
// was lost with nothing failing.
//
// At most once may miss a message only when a consumer, its connection or
// a broker dies while the message is on its way, so a backlog drained
// while no fault was in flight (Chaos.Clean: none began before the drain
// ended and healed after it began) must arrive whole (History.Drained).
// Faults come back to back, so few drains would be clean by chance: every
// third burst, and the last, after the faults stop, is sent and drained
// between two faults (bursts: Chaos.Between holds the next fault until
// the drain is over, at most bulkHold of draining), the others whenever
// they come.
const (
	bulkSubject     = "bulk"
	bulkGroup       = "bulk-once"
	bulkMessageSize = 256 << 10
	bulkHold        = time.Minute
)

// drainBacklogs sends a burst to bulkSubject, then drains it at most once
// as bulkGroup, every 10–20 s until stop, and once more after stop,
// recording each drain in h (History.Drained), clean if ch says no fault
// was in flight from the subscription's start until the backlog was
// drained. The group must exist at the earliest message before the first
// burst. Clients connect with conn; admin reads the group's backlog.
func drainBacklogs(t *testing.T, h *History, ch *Chaos, adm *admin.Client, servers string, conn qmq.ConnOption, seed uint64, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, conn, qmq.WithSendTimeout(30*time.Second))
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 13))
	bursts(ch, rng, bulkHold, stop, func(within time.Duration) bool {
		var ids []string
		for range 100 + rng.IntN(81) {
			m := p.GenerateMessage(bulkSubject)
			shapeTo(m, bulkMessageSize)
			h.Sending(m)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			h.Sent(m, p.SendMessage(ctx, m))
			cancel()
			ids = append(ids, m.ID())
		}
		from := time.Now()
		sub, err := qmq.Subscribe(servers, bulkSubject, bulkGroup, func(_ context.Context, m *qmq.Message) error {
			h.Delivered(bulkGroup, m, time.Now())
			return nil
		}, conn, qmq.WithAtMostOnce(), qmq.WithLogger(nil))
		if err != nil {
			t.Errorf("draining a backlog of %s: %v", bulkSubject, err)
			return false
		}
		if err := awaitDrained(h, adm, ids, within); err != nil {
			t.Logf("chaos: a backlog of %d messages of %s not drained: %v", len(ids), bulkSubject, err)
		}
		to := time.Now()
		sub.Close()
		h.Drained(bulkGroup, ids, ch.Clean(from, to))
		return true
	})
}

// bursts runs burst every 10–20 s (drawn from rng) until stop, and once
// more after it, until it returns false: every third time, and the last,
// between two faults (Chaos.Between holds the next fault until it is over,
// given hold to wait for what it sent), the others whenever they come,
// given 2 minutes.
func bursts(ch *Chaos, rng *rand.Rand, hold time.Duration, stop chan struct{}, burst func(within time.Duration) bool) {
	for i, last := 0, false; !last; i++ {
		timer := time.NewTimer(time.Duration(10000+rng.IntN(10000)) * time.Millisecond)
		select {
		case <-stop:
			timer.Stop()
			last = true
		case <-timer.C:
		}
		ok := true
		if last || i%3 == 2 {
			ch.Between(func() { ok = burst(hold) })
		} else {
			ok = burst(2 * time.Minute)
		}
		if !ok {
			return
		}
	}
}

// awaitDrained waits up to within until every acknowledged send of ids
// reached bulkGroup, or the group owes nothing in any broker group and
// nothing arrived for 2 s (what a fault made it miss never comes).
func awaitDrained(h *History, adm *admin.Client, ids []string, within time.Duration) error {
	last, lastAt := -1, time.Now()
	return Poll(within, func() error {
		got, want := h.deliveredOf(bulkGroup, ids)
		if got == want {
			return nil
		}
		if got != last {
			last, lastAt = got, time.Now()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := adm.Route(ctx, bulkSubject)
		if err != nil {
			return err
		}
		v, err := adm.ConsumerGroup(ctx, bulkSubject, bulkGroup)
		if err != nil {
			return err
		}
		if len(v.BrokerGroups) < len(r.BrokerGroups) || v.Total.Backlog > 0 || time.Since(lastAt) < 2*time.Second {
			return fmt.Errorf("%d of %d arrived; %d owed in %d of %d broker groups", got, want, v.Total.Backlog, len(v.BrokerGroups), len(r.BrokerGroups))
		}
		return nil
	})
}
