package test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// seenDelivery is one delivery a handler saw: when, the broker's delivery
// count, in which life of the message (1; 2 once its dead letter was
// resent), and, if the handler failed it, when it returned the failure.
type seenDelivery struct {
	at         time.Time
	deliveries int
	life       int
	failedAt   time.Time // zero: acknowledged
}

// deliveryBook records every delivery by message id. Safe for concurrent
// use.
type deliveryBook struct {
	mu   sync.Mutex
	byID map[string][]seenDelivery
}

func (b *deliveryBook) add(id string, d seenDelivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.byID[id] = append(b.byID[id], d)
}

func (b *deliveryBook) of(id string) []seenDelivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.byID[id])
}

// count returns how many ids of ids have a delivery for which ok holds.
func (b *deliveryBook) count(ids []string, ok func(seenDelivery) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, id := range ids {
		if slices.ContainsFunc(b.byID[id], ok) {
			n++
		}
	}
	return n
}

// retryBackoff is the group's wait after a message's deliveries-th
// delivery failed: first, doubling each time, at most most.
func retryBackoff(deliveries int, first, most time.Duration) time.Duration {
	d := first
	for i := 1; i < deliveries && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// TestRetriesAndDeadLettersAcrossLeaderKill runs a metaserver and a
// three-node broker group as processes, sets a consumer group's retries
// with `qmqctl group set` (3 deliveries, the first retry after 1 s, at
// most 2 s), and consumes with a handler that fails a fifth of the
// messages every time. It SIGKILLs the broker leader once each of those
// has failed once, while their retries wait, and checks: no retry comes
// before the previous failure plus the group's backoff; each failing
// message becomes a dead letter after 3 deliveries (`qmqctl deadletter
// list`) and no more; `qmqctl deadletter resend --all`, once the handler
// stops failing, delivers each again with its count afresh; every message
// is acknowledged in the end, none beyond its deliveries per life, and the
// group's lag reaches 0 (`qmqctl group show`).
func TestRetriesAndDeadLettersAcrossLeaderKill(t *testing.T) {
	const (
		subject       = "payments"
		group         = "settle"
		total         = 60
		failEvery     = 5 // messages 0, 5, 10, … fail while failing is on
		maxDeliveries = 3
		retryFirst    = time.Second
		retryMax      = 2 * time.Second
		// ackWait gives a message back if its nack is lost with the
		// leader: far longer than the handler takes, so such a redelivery
		// is never early either.
		ackWait = 10 * time.Second
	)
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	meta.Form("", "m1")
	servers := meta.ClientAddrs()
	c := NewCluster(t, "g1", "--meta", servers, "--election-timeout", "500ms")
	c.Form(servers, "n1", "n2", "n3")
	ctl := func(args ...string) string {
		t.Helper()
		out, err := c.Ctl(append([]string{"--server", servers}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	ctlJSON := func(out any, args ...string) error {
		return c.CtlJSON(out, append([]string{"--server", servers}, args...)...)
	}
	groupArgs := []string{"--subject", subject, "--group", group}

	// The group exists, with its retries, before anything is sent.
	ctl(append([]string{"consumer-group", "set", "--max-deliveries", fmt.Sprint(maxDeliveries), "--retry-first", retryFirst.String(),
		"--retry-max", retryMax.String(), "--ack-wait", ackWait.String()}, groupArgs...)...)
	var view admin.ConsumerGroupView
	if err := ctlJSON(&view, append([]string{"consumer-group", "show"}, groupArgs...)...); err != nil {
		t.Fatal(err)
	}
	if s := view.Total.Settings; s.MaxDeliveries != maxDeliveries || s.RetryFirst != retryFirst || s.RetryMax != retryMax || s.AckWait != ackWait {
		t.Fatalf("group show after group set: settings %+v", s)
	}

	// Send every message; a fifth of them will fail.
	p, err := qmq.NewProducer(servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var ids, failing, passing []string
	failSet := map[string]bool{}
	for i := range total {
		m := p.GenerateMessage(subject)
		m.SetInt("n", int64(i))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := p.SendMessage(ctx, m)
		cancel()
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		ids = append(ids, m.ID())
		if i%failEvery == 0 {
			failing = append(failing, m.ID())
			failSet[m.ID()] = true
		} else {
			passing = append(passing, m.ID())
		}
	}

	book := &deliveryBook{byID: map[string][]seenDelivery{}}
	var (
		stopFailing atomic.Bool // the handler acks everything
		resent      atomic.Bool // the dead letters were resent: a second life
	)
	sub, err := qmq.Subscribe(servers, subject, group, func(_ context.Context, m *qmq.Message) error {
		d := seenDelivery{at: time.Now(), deliveries: m.Deliveries(), life: 1}
		if resent.Load() && failSet[m.ID()] {
			d.life = 2
		}
		if failSet[m.ID()] && !stopFailing.Load() {
			d.failedAt = time.Now()
			book.add(m.ID(), d)
			return fmt.Errorf("refusing message %s", m.ID())
		}
		book.add(m.ID(), d)
		return nil
	}, qmq.WithPullWait(500*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })

	// Kill the leader once every failing message has failed once: their
	// retries wait in the schedule, for a new leader to fire.
	c.WaitFor(30*time.Second, "every failing message failed once", func() error {
		if n := book.count(failing, func(d seenDelivery) bool { return !d.failedAt.IsZero() }); n < len(failing) {
			return fmt.Errorf("%d of %d failed", n, len(failing))
		}
		return nil
	})
	old, oldSt, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL leader %s (term %d) with the retries pending", old.ID, oldSt.Term)
	old.Kill()
	c.WaitFor(20*time.Second, "a new leader", func() error {
		l, st, err := c.Leader()
		if err != nil {
			return err
		}
		if st.Term <= oldSt.Term {
			return fmt.Errorf("%s leads in term %d", l.ID, st.Term)
		}
		return nil
	})
	old.Restart()

	// Every failing message ends as a dead letter after its third
	// delivery; every other message is acknowledged; nothing is left to
	// deliver.
	deadIDs := func() (map[string]uint32, error) {
		var pages []admin.DeadLetterPage
		if err := ctlJSON(&pages, append([]string{"deadletter", "list"}, groupArgs...)...); err != nil {
			return nil, err
		}
		dead := map[string]uint32{}
		for _, pg := range pages {
			if pg.Total != len(pg.Letters) {
				return nil, fmt.Errorf("broker group %s keeps %d dead letters, listed %d", pg.BrokerGroup, pg.Total, len(pg.Letters))
			}
			for _, d := range pg.Letters {
				dead[d.ID] = d.Deliveries
			}
		}
		return dead, nil
	}
	var dead map[string]uint32
	c.WaitFor(60*time.Second, "every failing message a dead letter", func() error {
		var err error
		if dead, err = deadIDs(); err != nil {
			return err
		}
		if len(dead) < len(failing) {
			return fmt.Errorf("%d of %d dead letters", len(dead), len(failing))
		}
		return nil
	})
	for id, n := range dead {
		if !failSet[id] {
			t.Errorf("message %s, which the handler acked, is a dead letter after %d deliveries: %v", id, n, book.of(id))
		} else if n != maxDeliveries {
			t.Errorf("dead letter %s has %d deliveries, want %d", id, n, maxDeliveries)
		}
	}
	c.WaitFor(60*time.Second, "every other message acknowledged, and the group's lag 0 with its dead letters kept", func() error {
		if n := book.count(passing, func(d seenDelivery) bool { return d.failedAt.IsZero() }); n < len(passing) {
			return fmt.Errorf("%d of %d acknowledged", n, len(passing))
		}
		var v admin.ConsumerGroupView
		if err := ctlJSON(&v, append([]string{"consumer-group", "show"}, groupArgs...)...); err != nil {
			return err
		}
		if v.Total.Lag != 0 || v.Total.DeadLetters != len(failing) {
			return fmt.Errorf("lag %d, dead letters %d", v.Total.Lag, v.Total.DeadLetters)
		}
		return nil
	})

	// The handler recovers; the dead letters are resent and consumed.
	stopFailing.Store(true)
	resent.Store(true)
	var results []admin.DeadLetterResult
	if err := ctlJSON(&results, append([]string{"deadletter", "resend", "--all"}, groupArgs...)...); err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, r := range results {
		done += r.Done
	}
	if done != len(failing) {
		t.Fatalf("deadletter resend --all resent %d, want %d: %+v", done, len(failing), results)
	}
	c.WaitFor(60*time.Second, "every resent message acknowledged, no dead letter left and the lag 0", func() error {
		if n := book.count(failing, func(d seenDelivery) bool { return d.life == 2 && d.failedAt.IsZero() }); n < len(failing) {
			return fmt.Errorf("%d of %d resent messages acknowledged", n, len(failing))
		}
		var v admin.ConsumerGroupView
		if err := ctlJSON(&v, append([]string{"consumer-group", "show"}, groupArgs...)...); err != nil {
			return err
		}
		if v.Total.Lag != 0 || v.Total.DeadLetters != 0 {
			return fmt.Errorf("lag %d, dead letters %d", v.Total.Lag, v.Total.DeadLetters)
		}
		return nil
	})
	if dead, err := deadIDs(); err != nil || len(dead) != 0 {
		t.Errorf("dead letters after the resend was consumed: %v, %v", dead, err)
	}

	// Every delivery of every message, checked: counts, order, backoff.
	var lateness []time.Duration
	lateByRetry := map[int][]time.Duration{} // by the failed delivery's count
	for _, id := range ids {
		seen := book.of(id)
		sort.Slice(seen, func(i, j int) bool { return seen[i].at.Before(seen[j].at) })
		lives := map[int][]seenDelivery{}
		for _, d := range seen {
			lives[d.life] = append(lives[d.life], d)
		}
		for life, ds := range lives {
			if len(ds) > maxDeliveries {
				t.Errorf("message %s delivered %d times in life %d (at most %d): %v", id, len(ds), life, maxDeliveries, ds)
			}
			for i, d := range ds {
				if d.deliveries < 1 || d.deliveries > maxDeliveries {
					t.Errorf("message %s: delivery count %d in life %d (1..%d)", id, d.deliveries, life, maxDeliveries)
				}
				if i == 0 {
					continue
				}
				prev := ds[i-1]
				if d.deliveries <= prev.deliveries {
					t.Errorf("message %s: delivery count %d after %d in life %d", id, d.deliveries, prev.deliveries, life)
				}
				if prev.failedAt.IsZero() {
					continue // a redelivery after an ack the leader lost
				}
				// The broker's clock reads at least the failure's time, to
				// the millisecond it stores.
				due := prev.failedAt.Truncate(time.Millisecond).Add(retryBackoff(prev.deliveries, retryFirst, retryMax))
				if d.at.Before(due) {
					t.Errorf("message %s: delivery %d at %s, %s before its retry was due (failure %d at %s + %s)", id, d.deliveries,
						d.at.Format("15:04:05.000"), due.Sub(d.at), prev.deliveries, prev.failedAt.Format("15:04:05.000"),
						retryBackoff(prev.deliveries, retryFirst, retryMax))
				}
				lateness = append(lateness, d.at.Sub(due))
				lateByRetry[prev.deliveries] = append(lateByRetry[prev.deliveries], d.at.Sub(due))
			}
		}
		switch {
		case failSet[id] && len(lives[1]) != maxDeliveries:
			t.Errorf("failing message %s delivered %d times before it died, want %d: %v", id, len(lives[1]), maxDeliveries, lives[1])
		case failSet[id] && (len(lives[2]) == 0 || lives[2][0].deliveries != 1):
			t.Errorf("resent message %s: deliveries %v, want its count afresh", id, lives[2])
		case !failSet[id] && len(lives[1]) == 0:
			t.Errorf("message %s never delivered", id)
		}
	}
	if len(lateness) < len(failing)*(maxDeliveries-1) {
		t.Errorf("%d retries seen, want %d", len(lateness), len(failing)*(maxDeliveries-1))
	}
	for n := 1; n < maxDeliveries; n++ {
		l := lateByRetry[n]
		if len(l) == 0 {
			continue
		}
		slices.Sort(l)
		t.Logf("retries after failure %d: %d, lateness after their due time min %s, median %s, max %s", n, len(l),
			l[0].Round(time.Millisecond), l[len(l)/2].Round(time.Millisecond), l[len(l)-1].Round(time.Millisecond))
	}
}
