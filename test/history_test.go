package test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// TestCheckerFindsEveryKindOfFault feeds the checker a history with one of
// each fault it looks for, and one without any.
func TestCheckerFindsEveryKindOfFault(t *testing.T) {
	p, err := qmq.NewProducer("127.0.0.1:1") // never sends: only makes messages
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h := NewHistory()
	now := time.Now()
	msg := func(delay time.Duration) *qmq.Message {
		m := p.GenerateMessage("s")
		if delay > 0 {
			m.SetDeliverAt(now.Add(delay))
		}
		h.Sending(m)
		return m
	}
	good, dup, lost, unknown, recovered, delayed := msg(0), msg(0), msg(0), msg(0), msg(0), msg(time.Second)
	for _, m := range []*qmq.Message{good, dup, lost, delayed} {
		h.Sent(m, nil)
	}
	h.Sent(unknown, errors.New("timeout"))
	h.Sent(recovered, errors.New("timeout"))
	for _, g := range []string{"a", "b"} {
		h.Delivered(g, good, now)
		h.Delivered(g, dup, now)
		h.Delivered(g, recovered, now)
		h.Delivered(g, delayed, now.Add(time.Second))
	}
	h.Delivered("a", dup, now)
	h.DeliveredFrom("a", "g1", lost, now) // b never gets it
	if r := h.Check(Expectations{AtLeastOnce: []string{"a", "b"}}); len(r.Lost) != 1 || r.LostWhere["group b, subject s, broker group g1, at once"] != 1 || r.Recovered != 1 || r.Duplicated["a"] != 1 ||
		r.Acked != 4 || r.Unknown != 2 || r.Delayed != 1 || len(r.Early) != 0 || len(r.Unexpected) != 0 || r.OK() {
		t.Fatalf("report: %+v", r)
	}
	if n := h.Undelivered(Expectations{AtLeastOnce: []string{"a", "b"}}); n != 1 {
		t.Fatalf("undelivered %d, want 1", n)
	}
	h.Delivered("b", lost, now)
	stranger := p.GenerateMessage("s")
	h.Delivered("b", stranger, now)
	early := msg(time.Hour)
	h.Sent(early, nil)
	h.Delivered("a", early, now)
	h.Delivered("b", early, now.Add(time.Hour))
	r := h.Check(Expectations{AtLeastOnce: []string{"a", "b"}})
	if len(r.Lost) != 0 || len(r.Unexpected) != 1 || len(r.Early) != 1 || r.OK() {
		t.Fatalf("report: %+v", r)
	}
}

// checkerHistory returns an empty history and a function that records a
// message of subject s as sent and acknowledged (or, with a non-nil err,
// given up on).
func checkerHistory(t *testing.T) (*History, func(subject string, err error) *qmq.Message) {
	t.Helper()
	p, err := qmq.NewProducer("127.0.0.1:1") // never sends: only makes messages
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h := NewHistory()
	return h, func(subject string, err error) *qmq.Message {
		m := p.GenerateMessage(subject)
		h.Sending(m)
		h.Sent(m, err)
		return m
	}
}

// TestCheckerFindsTwiceToAtMostOnce: a message an at-most-once group
// receives twice fails the run; one it misses is only counted; the same
// double delivery to an at-least-once group is a duplicate.
func TestCheckerFindsTwiceToAtMostOnce(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"alo"}, AtMostOnce: []string{"amo"}}
	now := time.Now()
	once, twice, missed := sent("s", nil), sent("s", nil), sent("s", nil)
	for _, m := range []*qmq.Message{once, twice, missed} {
		h.Delivered("alo", m, now)
	}
	h.Delivered("alo", twice, now)
	h.Delivered("amo", once, now)
	h.Delivered("amo", twice, now)
	if r := h.Check(e); !r.OK() || r.Missed["amo"] != 1 || r.Duplicated["alo"] != 1 {
		t.Fatalf("before the second delivery to amo: %s", r)
	}
	h.Delivered("amo", twice, now.Add(time.Second))
	r := h.Check(e)
	if r.OK() || len(r.Twice) != 1 || !strings.HasPrefix(r.Twice[0], "amo:"+twice.ID()) || r.Missed["amo"] != 1 || len(r.Lost) != 0 {
		t.Fatalf("report: %s", r)
	}
	if n := h.Undelivered(e); n != 0 {
		t.Fatalf("undelivered %d: an at-most-once group owes nothing", n)
	}
}

// TestCheckerAtMostOnceCountsCopies: a send that a producer's retry stored
// in two broker groups (dedup is per broker group) is two messages, and an
// at-most-once group may receive each once; twice from one broker group is
// a second delivery.
func TestCheckerAtMostOnceCountsCopies(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtMostOnce: []string{"amo"}}
	now := time.Now()
	m := sent("s", nil)
	h.DeliveredFrom("amo", "g1", m, now)
	h.DeliveredFrom("amo", "g2", m, now)
	if r := h.Check(e); !r.OK() {
		t.Fatalf("a copy in each of two broker groups, each delivered once: %s", r)
	}
	h.DeliveredFrom("amo", "g2", m, now)
	if r := h.Check(e); r.OK() || len(r.Twice) != 1 || !strings.Contains(r.Twice[0], "broker group g2") {
		t.Fatalf("delivered twice from g2: %s", r)
	}
}

// TestCheckerCountsDeadLettersAsArrived: a message whose every delivery to
// a group failed is lost to that group unless the group keeps it as a dead
// letter; a dead letter of a message never sent is unexpected.
func TestCheckerCountsDeadLettersAsArrived(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"r"}}
	now := time.Now()
	retried, dead, stuck := sent("s", nil), sent("s", nil), sent("s", nil)
	h.Nacked("r", retried, now)
	h.Delivered("r", retried, now.Add(time.Second))
	for i := range 3 {
		h.Nacked("r", dead, now.Add(time.Duration(i)*time.Second))
	}
	h.Nacked("r", stuck, now)
	if n := h.Undelivered(e); n != 2 {
		t.Fatalf("undelivered %d, want 2 (only nacked)", n)
	}
	h.DeadLetters("r", []string{dead.ID()})
	r := h.Check(e)
	if len(r.Lost) != 1 || r.Lost[0] != "r:"+stuck.ID() || r.Nacked["r"] != 5 || r.DeadLettered["r"] != 1 || r.Duplicated["r"] != 0 || r.OK() {
		t.Fatalf("report: %s", r)
	}
	h.DeadLetters("r", []string{stuck.ID(), "never-sent"})
	r = h.Check(e)
	if len(r.Lost) != 0 || len(r.Unexpected) != 1 || r.Unexpected[0] != "r dead letter:never-sent" || r.OK() {
		t.Fatalf("report: %s", r)
	}
	// A nacked delivery before a delayed message's time is early too.
	late := sent("s", nil)
	h.sends[late.ID()].deliverAt = now.Add(time.Hour)
	h.Nacked("r", late, now)
	h.Delivered("r", late, now.Add(time.Hour))
	if r := h.Check(e); len(r.Early) != 1 {
		t.Fatalf("report: %s", r)
	}
}

// TestCheckerHoldsBroadcastToItsJoin: a broadcast group, and one at the
// latest message, owes every acknowledged send of a subject it joined that
// began after its join, nothing sent before, nothing of a subject it did
// not join, nothing not acknowledged; one that never joined fails the run.
func TestCheckerHoldsBroadcastToItsJoin(t *testing.T) {
	for name, e := range map[string]Expectations{"broadcast": {Broadcast: []string{"b"}}, "latest": {Latest: []string{"b"}}} {
		t.Run(name, func(t *testing.T) { checkFromJoin(t, e) })
	}
}

func checkFromJoin(t *testing.T, e Expectations) {
	h, sent := checkerHistory(t)
	if r := h.Check(e); r.OK() || len(r.NotJoined) != 1 {
		t.Fatalf("report with b never joined: %s", r)
	}
	join := time.Now()
	h.Joined("b", "s", join)
	before, after, gotIt, otherSubject, unknown := sent("s", nil), sent("s", nil), sent("s", nil), sent("t", nil), sent("s", errors.New("timeout"))
	h.sends[before.ID()].sendingAt = join // not after the join
	for _, m := range []*qmq.Message{after, gotIt, otherSubject, unknown} {
		h.sends[m.ID()].sendingAt = join.Add(time.Millisecond)
	}
	h.Delivered("b", gotIt, join.Add(time.Second))
	if n := h.Undelivered(e); n != 1 {
		t.Fatalf("undelivered %d, want 1", n)
	}
	r := h.Check(e)
	if len(r.Lost) != 1 || r.Lost[0] != "b:"+after.ID() || len(r.NotJoined) != 0 || r.OK() {
		t.Fatalf("report: %s", r)
	}
	h.Delivered("b", after, join.Add(time.Second))
	if r := h.Check(e); !r.OK() {
		t.Fatalf("report: %s", r)
	}
}

// TestCheckerFindsAChosenIDInTwoBrokerGroups: a send whose id its
// producer chose, delivered from two broker groups (to one consumer group
// or to two), fails the run; a generated id's copy in each of two broker
// groups is at least once.
func TestCheckerFindsAChosenIDInTwoBrokerGroups(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"a", "b"}}
	now := time.Now()
	generated := sent("s", nil)
	p, err := qmq.NewProducer("127.0.0.1:1") // never sends: only makes messages
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	chosen := func() *qmq.Message {
		m := p.GenerateMessage("s")
		if err := m.SetID(fmt.Sprintf("order-%d", len(h.sends))); err != nil {
			t.Fatal(err)
		}
		h.SendingChosen(m)
		h.Sent(m, nil)
		return m
	}
	once, inTwo, inTwoGroups := chosen(), chosen(), chosen()
	for _, g := range []string{"a", "b"} {
		h.DeliveredFrom(g, "g1", generated, now)
		h.DeliveredFrom(g, "g2", generated, now)
		h.DeliveredFrom(g, "g1", once, now)
		h.DeliveredFrom(g, "g1", once, now) // a redelivery from the same broker group
		h.DeliveredFrom(g, "g2", inTwo, now)
	}
	h.DeliveredFrom("a", "g1", inTwoGroups, now)
	h.DeliveredFrom("b", "g1", inTwoGroups, now)
	if r := h.Check(e); !r.OK() {
		t.Fatalf("every chosen id from one broker group: %s", r)
	}
	h.DeliveredFrom("a", "g1", inTwo, now)
	h.DeliveredFrom("b", "g2", inTwoGroups, now)
	r := h.Check(e)
	if r.OK() || len(r.Split) != 2 || !strings.Contains(strings.Join(r.Split, " "), inTwo.ID()+" (delivered from broker groups g1, g2)") ||
		!strings.Contains(strings.Join(r.Split, " "), inTwoGroups.ID()) {
		t.Fatalf("report: %s", r)
	}
}

// TestCheckerFindsAMessageExpiredInAPacedBurst: a send of a burst worked
// through by slow handlers with no fault in flight, handled twice (it
// expired waiting for a worker) or never, fails the run; handled twice in
// a burst with a fault in flight is a duplicate; a send whose outcome is
// unknown is owed nothing.
func TestCheckerFindsAMessageExpiredInAPacedBurst(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"slow"}}
	now := time.Now()
	once, again, faulty, unknown := sent("s", nil), sent("s", nil), sent("s", nil), sent("s", errors.New("timeout"))
	for _, m := range []*qmq.Message{once, again, faulty} {
		h.Delivered("slow", m, now)
	}
	h.Delivered("slow", faulty, now.Add(time.Second))
	h.Paced("slow", []string{once.ID(), again.ID(), unknown.ID()}, true)
	h.Paced("slow", []string{faulty.ID()}, false)
	r := h.Check(e)
	if !r.OK() || r.Paced["slow"] != 2 || r.CleanPaced["slow"] != 1 || r.Duplicated["slow"] != 1 {
		t.Fatalf("report: %s", r)
	}
	h.Nacked("slow", again, now.Add(time.Second))
	r = h.Check(e)
	if r.OK() || len(r.Expired) != 1 || !strings.HasPrefix(r.Expired[0], "slow:"+again.ID()+" (burst 1, handled 2 times") {
		t.Fatalf("report: %s", r)
	}
}

// TestCheckerScopesGroupsToTheirSubjects: a group that consumes only some
// subjects (Expectations.Subjects) is owed, and misses, only their sends;
// a group not named consumes every subject.
func TestCheckerScopesGroupsToTheirSubjects(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"alo"}, AtMostOnce: []string{"amo", "bulk"},
		Subjects: map[string][]string{"alo": {"s"}, "bulk": {"big"}}}
	now := time.Now()
	small, big := sent("s", nil), sent("big", nil)
	h.Delivered("alo", small, now)
	h.Delivered("bulk", big, now)
	r := h.Check(e)
	if !r.OK() || r.Missed["amo"] != 2 || r.Missed["bulk"] != 0 || len(r.Lost) != 0 {
		t.Fatalf("report: %s", r)
	}
	if n := h.Undelivered(e); n != 0 {
		t.Fatalf("undelivered %d: alo is owed nothing of big", n)
	}
	e.Subjects = nil // now alo consumes big too, and never got it
	if r := h.Check(e); r.OK() || len(r.Lost) != 1 || r.Lost[0] != "alo:"+big.ID() {
		t.Fatalf("report with alo consuming every subject: %s", r)
	}
}

// TestCheckerRequiresCleanBacklogsWhole: an acknowledged send of a backlog
// an at-most-once group drained with no fault in flight, never delivered,
// fails the run; the same in a backlog drained with a fault in flight is
// only missed, as is a send whose outcome is unknown in either.
func TestCheckerRequiresCleanBacklogsWhole(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtMostOnce: []string{"amo"}}
	now := time.Now()
	got, lostClean, lostFaulty, unknown := sent("s", nil), sent("s", nil), sent("s", nil), sent("s", errors.New("timeout"))
	h.Delivered("amo", got, now)
	h.Drained("amo", []string{got.ID(), lostFaulty.ID()}, false)
	h.Drained("amo", []string{got.ID(), unknown.ID()}, true)
	r := h.Check(e)
	if !r.OK() || r.Bursts["amo"] != 2 || r.CleanBursts["amo"] != 1 || r.Missed["amo"] != 2 {
		t.Fatalf("report: %s", r)
	}
	h.Drained("amo", []string{lostClean.ID()}, true)
	r = h.Check(e)
	if r.OK() || len(r.Incomplete) != 1 || !strings.HasPrefix(r.Incomplete[0], "amo:"+lostClean.ID()+" (backlog 3") {
		t.Fatalf("report: %s", r)
	}
	h.Delivered("amo", lostClean, now)
	if r := h.Check(e); !r.OK() {
		t.Fatalf("report once delivered: %s", r)
	}
}

// TestCheckerUndeliveredBefore counts only sends handed over before a
// time: acknowledged ones some group still owes, and those still pending.
func TestCheckerUndeliveredBefore(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"alo"}}
	at := time.Now()
	old, oldGot, recent := sent("s", nil), sent("s", nil), sent("s", nil)
	h.Delivered("alo", oldGot, at)
	p, err := qmq.NewProducer("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pending := p.GenerateMessage("s")
	h.Sending(pending)
	for _, m := range []*qmq.Message{old, oldGot, pending} {
		h.sends[m.ID()].sendingAt = at.Add(-time.Minute)
	}
	h.sends[recent.ID()].sendingAt = at
	if n, p := h.UndeliveredBefore(e, at); n != 1 || p != 1 {
		t.Fatalf("before the time: %d undelivered, %d pending; want 1, 1", n, p)
	}
	if n, p := h.UndeliveredBefore(e, time.Time{}); n != 2 || p != 1 {
		t.Fatalf("at any time: %d undelivered, %d pending; want 2, 1", n, p)
	}
}

// TestUndeliveredFollowsTheHistory: a poll of what is undelivered looks
// only at the sends answered since the last poll and those still owed;
// after every kind of change it must count what a poll of a fresh copy
// of the same history counts.
func TestUndeliveredFollowsTheHistory(t *testing.T) {
	h, sent := checkerHistory(t)
	e := Expectations{AtLeastOnce: []string{"a"}, Broadcast: []string{"b"}}
	now := time.Now()
	want := func(step string, undelivered, pending int, before time.Time) {
		t.Helper()
		n, p := h.UndeliveredBefore(e, before)
		if n != undelivered || p != pending {
			t.Fatalf("%s: undelivered %d with %d pending, want %d with %d", step, n, p, undelivered, pending)
		}
		// The same question of a history that was never polled.
		h.mu.Lock()
		saved := h.owing
		h.owing = nil
		h.mu.Unlock()
		if n2, p2 := h.UndeliveredBefore(e, before); n2 != n || p2 != p {
			t.Fatalf("%s: a fresh poll counts %d with %d pending, the incremental one %d with %d", step, n2, p2, n, p)
		}
		h.mu.Lock()
		h.owing = saved
		h.mu.Unlock()
	}
	m1, m2 := sent("s", nil), sent("s", nil)
	want("two sent", 2, 0, time.Time{})
	h.Delivered("a", m1, now)
	want("one delivered", 1, 0, time.Time{})
	m3 := sent("s", nil)
	want("a third sent", 2, 0, time.Time{})
	// b joins before m4 is handed over: m4 is owed to it, and stays owed
	// once a has it.
	h.Joined("b", "s", time.Now())
	m4 := sent("s", nil)
	for _, m := range []*qmq.Message{m2, m3, m4} {
		h.Delivered("a", m, now)
	}
	want("b owed m4", 1, 0, time.Time{})
	h.Delivered("b", m4, now)
	want("all delivered", 0, 0, time.Time{})
	// A send with no answer is pending, and owed once acknowledged.
	prod, err := qmq.NewProducer("127.0.0.1:1") // never sends: only makes messages
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	p := prod.GenerateMessage("s")
	h.Sending(p)
	want("one pending", 0, 1, time.Time{})
	cut := time.Now()
	later := sent("s", nil)
	want("before the cut", 0, 1, cut)
	want("any time", 1, 1, time.Time{})
	h.Sent(p, nil)
	want("answered", 1, 0, cut)
	want("answered, any time", 2, 0, time.Time{})
	h.Delivered("a", later, now)
	h.Delivered("b", later, now)
	h.Delivered("a", p, now)
	h.Delivered("b", p, now)
	want("the end", 0, 0, time.Time{})
	// A join recorded after a poll looked at a send handed over after
	// the join began: the send is owed from then on.
	joinedAt := time.Now()
	m5 := sent("t", nil)
	h.Delivered("a", m5, now)
	want("b not on t", 0, 0, time.Time{})
	h.Joined("b", "t", joinedAt)
	want("b joined t before m5", 1, 0, time.Time{})
	// A message handed over again after its answer is one send.
	acked := h.AckedCount()
	h.Sending(m5)
	if n := h.AckedCount(); n != acked-1 {
		t.Fatalf("m5 handed over again: %d acknowledged, want %d", n, acked-1)
	}
	h.Sent(m5, nil)
	if n := h.AckedCount(); n != acked {
		t.Fatalf("m5 acknowledged again: %d acknowledged, want %d", n, acked)
	}
	want("m5 owed to b again", 1, 0, time.Time{})
}
