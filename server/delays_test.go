package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/logs"
)

// subjectMessages reads every message of subject on n's replica.
func subjectMessages(t *testing.T, n *Node, subject string) []*logs.Message {
	t.Helper()
	var out []*logs.Message
	for seq := int64(0); seq < n.fsm.Ends().Consume[subject]/logs.ConsumeRecordSize; seq++ {
		m, err := n.fsm.Message(subject, seq)
		if err != nil {
			t.Fatalf("read %s #%d on %s: %v", subject, seq, n.cfg.ID, err)
		}
		out = append(out, m)
	}
	return out
}

// wantDeliveredOnce asserts that subject holds each of ids exactly once,
// nothing else, and no delayed message appended before it was due.
func wantDeliveredOnce(t *testing.T, n *Node, subject string, ids map[string]time.Time) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range subjectMessages(t, n, subject) {
		seen[m.ID]++
		due, ok := ids[m.ID]
		switch {
		case !ok:
			t.Errorf("%s holds %s, never sent", subject, m.ID)
		case m.AppendedAt < due.UnixMilli() || m.DeliverAt != due.UnixMilli():
			t.Errorf("%s: due %d, delivered at %d (deliver-at %d)", m.ID, due.UnixMilli(), m.AppendedAt, m.DeliverAt)
		}
	}
	for id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s delivered %d times, want once", id, seen[id])
		}
	}
}

// sendDelayed sends n messages due from first to last, spread evenly, and
// returns their due times by id.
func sendDelayed(t *testing.T, p *qmq.Producer, subject string, n int, first, last time.Time) map[string]time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]time.Time{}
	for i := range n {
		m := p.GenerateMessage(subject)
		due := first.Add(last.Sub(first) * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
		m.SetDeliverAt(due)
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("send delayed: %v", err)
		}
		out[m.ID()] = due
	}
	return out
}

func merge(a, b map[string]time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestDelaysSurviveFailoverAndFullRestart: delayed messages pending when
// the leader dies are fired by the next leader, and those pending when
// every node stops are fired after they all restart; each exactly once,
// none early.
func TestDelaysSurviveFailoverAndFullRestart(t *testing.T) {
	nodes := startGroup(t)
	addrs := []string{}
	for _, n := range nodes {
		addrs = append(addrs, n.ClientAddr())
	}
	p, err := qmq.NewProducer(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	soon := sendDelayed(t, p, "timers", 150, start.Add(2*time.Second), start.Add(3*time.Second))
	later := sendDelayed(t, p, "timers", 50, start.Add(8*time.Second), start.Add(9*time.Second))

	old := leaderOf(nodes)
	old.Close()
	var live []*Node
	for _, n := range nodes {
		if n != old {
			live = append(live, n)
		}
	}
	waitFor(t, 10*time.Second, "a new leader", func() bool { return leaderOf(live) != nil })
	leader := leaderOf(live)
	waitFor(t, 20*time.Second, "the first batch to fire on the new leader", func() bool {
		return len(subjectMessages(t, leader, "timers")) >= len(soon)
	})
	if time.Now().Before(start.Add(8 * time.Second)) {
		wantDeliveredOnce(t, leader, "timers", soon)
	}

	// Stop every node with the second batch pending, then start them all.
	for _, n := range live {
		n.Close()
	}
	if time.Now().After(start.Add(8 * time.Second)) {
		t.Fatal("the second batch fell due before the restart: the test did not exercise it")
	}
	var again []*Node
	for _, n := range nodes {
		r, err := New(n.cfg)
		if err != nil {
			t.Fatalf("restart %s: %v", n.cfg.ID, err)
		}
		t.Cleanup(func() { r.Close() })
		again = append(again, r)
	}
	all := merge(soon, later)
	waitFor(t, 30*time.Second, "every delayed message to fire after the restart", func() bool {
		l := leaderOf(again)
		return l != nil && len(subjectMessages(t, l, "timers")) >= len(all)
	})
	leader = leaderOf(again)
	wantDeliveredOnce(t, leader, "timers", all)
	waitFor(t, 10*time.Second, "every replica to apply the same entries", func() bool {
		for _, n := range again {
			if n.fsm.Applied() != leader.fsm.Applied() {
				return false
			}
		}
		return true
	})
	for _, n := range again {
		wantDeliveredOnce(t, n, "timers", all)
		if d := n.fsm.Delays(); d.Pending != 0 {
			t.Errorf("%s: %d still pending", n.cfg.ID, d.Pending)
		}
	}
}

// TestDelaysAcrossHourBoundaries drives the leader's clock by hand across
// two hour boundaries: entries due in the current hour, the next one and
// the one after fire when the clock reaches them and not before, the last
// loaded into the wheel only once the clock enters the hour before it.
func TestDelaysAcrossHourBoundaries(t *testing.T) {
	var offset atomic.Int64 // the fake clock: real time plus offset
	base := time.Now().Truncate(time.Hour).Add(49 * time.Hour).Add(-time.Second)
	offset.Store(int64(base.Sub(time.Now())))
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	set := func(at time.Time) { offset.Store(int64(at.Sub(time.Now()))) }
	n := startNode(t, "n1", true, func(c *Config) { c.Now = clock })
	waitLeader(t, n)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	hour := base.Add(time.Second) // the first boundary
	set(base)                     // the clock ran on while the node started
	due := map[string]time.Time{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, at := range []time.Time{hour.Add(-500 * time.Millisecond), hour.Add(500 * time.Millisecond), hour.Add(time.Hour + 500*time.Millisecond)} {
		m := p.GenerateMessage("boundary")
		m.SetDeliverAt(at)
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		due[m.ID()] = at
	}
	if h := n.fsm.Delays().Hours; len(h) != 3 {
		t.Fatalf("pending by hour: %+v, want three hours", h)
	}
	held := func() int { return len(subjectMessages(t, n, "boundary")) }
	for i, step := range []time.Time{hour.Add(-400 * time.Millisecond), hour.Add(600 * time.Millisecond), hour.Add(time.Hour + 600*time.Millisecond)} {
		// Just before the step's entry is due, it has not fired.
		set(step.Add(-200 * time.Millisecond))
		time.Sleep(5 * delayPoll)
		if got := held(); got != i {
			t.Fatalf("at %s: %d delivered, want %d", clock().UTC().Format(time.RFC3339Nano), got, i)
		}
		set(step)
		waitFor(t, 5*time.Second, fmt.Sprintf("entry %d to fire", i+1), func() bool { return held() == i+1 })
	}
	for _, m := range subjectMessages(t, n, "boundary") {
		if m.AppendedAt < due[m.ID].UnixMilli() {
			t.Errorf("%s fired at %d, due %d", m.ID, m.AppendedAt, due[m.ID].UnixMilli())
		}
	}
}
