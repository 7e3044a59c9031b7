package server

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// subjectMessages reads every message of subject on n's replica.
func subjectMessages(t *testing.T, n *Node, subject string) []*message.Message {
	t.Helper()
	var out []*message.Message
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

// TestDelaysAcrossAnHourBoundaryAndAClockJump: on a leader whose clock
// reads a few seconds before an hour boundary (49 hours ahead of the
// machine's), entries due just before and just after the boundary fire as
// its clock crosses it, none before its time. Then the leader's clock
// jumps an hour forward: the entry due in the hour after, which the jump
// would make due, does not fire, and what the leader stamps does not jump:
// within a term it keeps time by the monotonic clock.
func TestDelaysAcrossAnHourBoundaryAndAClockJump(t *testing.T) {
	var offset atomic.Int64 // the fake clock: real time plus offset
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	set := func(at time.Time) { offset.Store(int64(at.Sub(time.Now()))) }
	hour := time.Now().Truncate(time.Hour).Add(49 * time.Hour) // the boundary
	set(hour.Add(-4 * time.Second))
	n := startNode(t, "n1", true, func(c *Config) { c.Now = clock })
	waitLeader(t, n)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	due := map[string]time.Time{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(at time.Time) {
		m := p.GenerateMessage("boundary")
		m.SetDeliverAt(at)
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		due[m.ID()] = at
	}
	for _, at := range []time.Time{hour.Add(-500 * time.Millisecond), hour.Add(500 * time.Millisecond), hour.Add(time.Hour + 500*time.Millisecond)} {
		send(at)
	}
	if h := n.fsm.Delays().Hours; len(h) != 3 {
		t.Fatalf("pending by hour: %+v, want three hours", h)
	}
	held := func() int { return len(subjectMessages(t, n, "boundary")) }
	waitFor(t, 10*time.Second, "the entries either side of the boundary to fire", func() bool { return held() == 2 })
	for _, m := range subjectMessages(t, n, "boundary") {
		if m.AppendedAt < due[m.ID].UnixMilli() {
			t.Errorf("%s fired at %d, due %d", m.ID, m.AppendedAt, due[m.ID].UnixMilli())
		}
	}

	set(clock().Add(time.Hour)) // the leader's clock jumps past the last entry's time
	time.Sleep(5 * delayPoll)   // what must not happen cannot be awaited: give it five polls
	if got := held(); got != 2 {
		t.Fatalf("after a forward clock jump, %d delivered: the entry due an hour later fired early", got)
	}
	send(time.Time{}) // an ordinary message: stamped by the leader's held-back clock
	msgs := subjectMessages(t, n, "boundary")
	if last := msgs[len(msgs)-1]; last.AppendedAt >= hour.Add(time.Hour).UnixMilli() {
		t.Fatalf("a message sent after the jump is stamped %s", time.UnixMilli(last.AppendedAt).UTC())
	}
}
