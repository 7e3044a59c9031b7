package fsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// A message handed out its group's most deliveries becomes a dead letter
// when it fails again, whether by a nack, a session expiry or an ack
// timeout.
func TestDeadLetterAtMaxDeliveries(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetMaxDeliveries|SetAckWait, ConsumerGroupSettings{MaxDeliveries: 2, AckWait: 1000})
	r.sendN("s", 3)
	r.pullN("g", "c", 1)
	if res := r.nack("g", "c", r.now, one(0)); res.Retried != 1 || res.Dead != 0 {
		t.Fatalf("first nack: %+v", res)
	}
	p := r.pullN("g", "c", 1)
	if !slices.Equal(deliveriesOf(p), []uint32{2}) {
		t.Fatalf("second delivery: %+v", p.Entries)
	}
	if res := r.nack("g", "c", r.now, one(1)); res.Retried != 0 || res.Dead != 1 {
		t.Fatalf("nack at max deliveries: %+v", res)
	}
	d, n := r.f.DeadLetters("s", "g", 0, 10)
	if n != 1 || d[0] != (DeadLetter{Seq: 0, Deliveries: 2, At: r.now}) {
		t.Fatalf("dead letters %+v of %d", d, n)
	}
	// By Reclaim: seq 1 handed out twice (the second time to c2).
	r.pullN("g", "c", 1)
	reclaimAt(t, r.f, r.next(), r.now, "s", "g", "c")
	r.pullN("g", "c2", 1)
	if res := reclaimAt(t, r.f, r.next(), r.now, "s", "g", "c2"); res.Reclaimed != 1 {
		t.Fatalf("reclaim: %+v", res)
	}
	// By Expire: seq 2 twice past its ack wait.
	p = r.pullN("g", "c3", 1)
	r.now += 1000
	if res := r.expire("g", "c3", one(p.Entries[0].PullSeq)); res.Expired != 1 || res.Dead != 0 {
		t.Fatalf("first expire: %+v", res)
	}
	p = r.pullN("g", "c3", 1)
	r.now += 1000
	if res := r.expire("g", "c3", one(p.Entries[0].PullSeq)); res.Expired != 0 || res.Dead != 1 {
		t.Fatalf("expire at max deliveries: %+v", res)
	}
	if got := r.dead("g"); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("dead letters %v", got)
	}
	if info := r.group("g"); info.DeadLetters != 3 || info.Lag() != 0 {
		t.Fatalf("group %+v", info)
	}
}

// Expire hands back only entries past their deadline; Extend moves a
// deadline to now plus the ack wait.
func TestExpireAndExtend(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: 1000})
	r.sendN("s", 3)
	t0 := r.now
	r.pullN("g", "c", 1) // deadline t0+1000
	r.now = t0 + 500
	r.pullN("g", "c", 1) // deadline t0+1500
	r.pullN("g", "c", 1) // deadline t0+1500, extended below
	r.now = t0 + 800
	ext := resultAs[*ExtendResult](t, r.apply(&Extend{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{one(2)}}))
	if ext.Extended != 1 {
		t.Fatalf("extend: %+v", ext)
	}
	r.now = t0 + 999
	if res := r.expire("g", "c", message.AckRange{First: 0, Last: 2}); res.Expired != 0 {
		t.Fatalf("expire before any deadline: %+v", res)
	}
	r.now = t0 + 1000
	if res := r.expire("g", "c", message.AckRange{First: 0, Last: 2}); res.Expired != 1 {
		t.Fatalf("expire at the first deadline: %+v", res)
	}
	r.now = t0 + 1500
	if res := r.expire("g", "c", message.AckRange{First: 0, Last: 2}); res.Expired != 1 {
		t.Fatalf("expire at the second deadline (the third was extended): %+v", res)
	}
	r.now = t0 + 1799
	if res := r.expire("g", "c", message.AckRange{First: 0, Last: 2}); res.Expired != 0 {
		t.Fatalf("expire before the extended deadline: %+v", res)
	}
	r.now = t0 + 1800
	if res := r.expire("g", "c", message.AckRange{First: 0, Last: 2}); res.Expired != 1 {
		t.Fatalf("expire at the extended deadline: %+v", res)
	}
	if got := consumeSeqs(r.pullN("g", "c2", 10)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("expired entries handed again: %v", got)
	}
}

// Overdue finds the consumers whose entries passed their ack wait. One
// that acked them meanwhile is not named when its deadlines run in window
// order (its bound was brought up to date by the ack); when they do not
// (an entry was extended), it is named with no ranges, and the Expire
// proposed for it brings its bound up to date, so it is not named again
// until an entry is due.
func TestOverdue(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: 1000})
	r.sendN("s", 6)
	t0 := r.now
	r.pullN("g", "a", 2)
	r.pullN("g", "b", 2)
	r.ack("g", "b", message.AckRange{First: 0, Last: 1})
	r.pullN("g", "c", 2)
	r.now = t0 + 500
	resultAs[*ExtendResult](t, r.apply(&Extend{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{one(0)}}))
	r.ack("g", "c", one(1))
	if got := r.f.Overdue(t0+999, 100); len(got) != 0 {
		t.Fatalf("overdue before the deadline: %+v", got)
	}
	got := r.f.Overdue(t0+1000, 100)
	if len(got) != 2 || got[0].ID.Consumer != "a" || !slices.Equal(got[0].Ranges, []message.AckRange{{First: 0, Last: 1}}) ||
		got[1].ID.Consumer != "c" || len(got[1].Ranges) != 0 {
		t.Fatalf("overdue: %+v", got)
	}
	if got := r.f.Overdue(t0+1000, 1); len(got) != 1 || !slices.Equal(got[0].Ranges, []message.AckRange{{First: 0, Last: 0}}) {
		t.Fatalf("overdue with limit 1: %+v", got)
	}
	r.now = t0 + 1000
	for _, o := range got {
		resultAs[*ExpireResult](t, r.apply(&Expire{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: o.ID.Consumer, Epoch: o.Epoch, Ranges: o.Ranges}))
	}
	if got := r.f.Overdue(t0+1499, 100); len(got) != 0 {
		t.Fatalf("overdue after the expires: %+v", got)
	}
	if got := r.f.Overdue(t0+1500, 100); len(got) != 1 || got[0].ID.Consumer != "c" || !slices.Equal(got[0].Ranges, []message.AckRange{one(0)}) {
		t.Fatalf("overdue at the extended deadline: %+v", got)
	}
}

// An entry handed out while the group had no ack wait gets a deadline
// when extended after one is set, and Overdue finds it.
func TestExtendGivesADeadlineOverdueFinds(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: 0})
	r.sendN("s", 1)
	r.pullN("g", "c", 1)
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: 1000})
	resultAs[*ExtendResult](t, r.apply(&Extend{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{one(0)}}))
	got := r.f.Overdue(r.now+1000, 100)
	if len(got) != 1 || !slices.Equal(got[0].Ranges, []message.AckRange{one(0)}) {
		t.Fatalf("overdue after the extend: %+v", got)
	}
}

// A consumer holds at most the group's MaxInFlight unacked entries.
func TestMaxInFlight(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetMaxInFlight, ConsumerGroupSettings{MaxInFlight: 2})
	r.sendN("s", 5)
	if got := consumeSeqs(r.pullN("g", "c", 5)); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("first pull: %v", got)
	}
	if got := r.pullN("g", "c", 5); len(got.Entries) != 0 {
		t.Fatalf("pull at max in flight: %v", consumeSeqs(got))
	}
	if got := consumeSeqs(r.pullN("g", "c2", 5)); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("another consumer: %v", got)
	}
	r.ack("g", "c", one(1))
	if got := consumeSeqs(r.pullN("g", "c", 5)); !slices.Equal(got, []int64{4}) {
		t.Fatalf("after an ack: %v", got)
	}
}

// At-most-once entries are done as they are handed out: a reclaim gives
// none back.
func TestAtMostOnce(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: 1000})
	r.sendN("s", 3)
	p := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 2, AtMostOnce: true})
	if got := consumeSeqs(p); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("pulled %v", got)
	}
	if info := r.group("g"); info.Unacked != 0 {
		t.Fatalf("at-most-once entries unacked: %+v", info)
	}
	if got := r.f.Overdue(r.now+5000, 100); len(got) != 0 {
		t.Fatalf("at-most-once entries overdue: %+v", got)
	}
	if res := reclaimAt(t, r.f, r.next(), r.now, "s", "g", "c"); res.Reclaimed != 0 {
		t.Fatalf("reclaim: %+v", res)
	}
	if got := consumeSeqs(r.pullN("g", "c2", 10)); !slices.Equal(got, []int64{2}) {
		t.Fatalf("after the reclaim: %v", got)
	}
}

// A consumer holding nothing unacked has no deadline: however many ack
// waits pass, Overdue names none of them, so the leader proposes no Expire
// for them. One that holds entries is named only once one of them is
// overdue, when their deadlines run in the order they were handed out (as
// they do unless an entry was extended or the ack wait shortened). Idle
// consumers used to be named with no ranges once an ack wait after their
// last pull: an Expire per idle consumer per ack wait.
func TestIdleConsumersNeedNoExpire(t *testing.T) {
	r := newGroupRig(t)
	const wait = 1000
	r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: wait})
	const idle = 50
	r.sendN("s", idle+2)
	for i := range idle {
		c := fmt.Sprint("idle-", i)
		r.pullN("g", c, 1)
		r.ack("g", c, one(0))
		r.now += 10
	}
	t0 := r.now
	r.pullN("g", "busy", 1) // deadline t0 + wait
	r.now += 500
	r.pullN("g", "busy", 1) // t0 + 500 + wait
	r.ack("g", "busy", one(0))
	for k := int64(1); k <= 4; k++ {
		if got := r.f.Overdue(t0+k*wait-1, 1000); len(got) != 0 {
			t.Fatalf("%d ack waits on: %d consumers overdue (the first %+v), want none", k, len(got), got[0])
		}
		if k == 1 {
			if got := r.f.Overdue(t0+500+wait, 1000); len(got) != 1 || got[0].ID.Consumer != "busy" || !slices.Equal(got[0].Ranges, []message.AckRange{one(1)}) {
				t.Fatalf("the busy consumer's second entry due: overdue %+v", got)
			}
			r.now = t0 + 400 + wait
			r.ack("g", "busy", one(1))
		}
	}
}

// wantDeadlineBounds checks every consumer's deadline bound: at or before
// the earliest deadline of its open entries (Overdue would miss an entry
// otherwise), and none when it holds nothing open.
func wantDeadlineBounds(t *testing.T, f *FSM) {
	t.Helper()
	for _, c := range f.st.consumers {
		earliest := int64(noDeadline)
		for _, p := range c.window {
			if !p.acked && p.deadline != 0 {
				earliest = min(earliest, p.deadline)
			}
		}
		if c.nextDeadline > earliest || c.open == 0 && c.nextDeadline != noDeadline {
			t.Fatalf("consumer %v holding %d open: bound %d, earliest open deadline %d", c.key, c.open, c.nextDeadline, earliest)
		}
	}
}

// The deadline bound stays at or before every open entry's deadline
// through pulls, acks, nacks, extends, expires and changes of the ack
// wait, in any order.
func TestDeadlineBoundNeverPassesAnOpenDeadline(t *testing.T) {
	r := newGroupRig(t)
	rnd := rand.New(rand.NewPCG(1, 2))
	r.sendN("s", 2000)
	consumers := []string{"a", "b", "c"}
	for range 3000 {
		c := consumers[rnd.IntN(len(consumers))]
		r.now += int64(rnd.IntN(400))
		next := r.f.st.byKey[consumerKey{"s", "g", c}]
		some := func() message.AckRange {
			if next == nil || next.next == 0 {
				return one(0)
			}
			first := next.ackPos + rnd.Int64N(max(next.next-next.ackPos, 1))
			return message.AckRange{First: first, Last: min(first+rnd.Int64N(3), next.next-1)}
		}
		switch rnd.IntN(7) {
		case 0, 1:
			r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: c, Max: 1 + rnd.IntN(4), Start: StartEarliest})
		case 2:
			r.apply(&Ack{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: c, Ranges: []message.AckRange{some()}})
		case 3:
			r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: c, RetryAt: r.now, Ranges: []message.AckRange{some()}})
		case 4:
			r.apply(&Extend{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: c, Ranges: []message.AckRange{some()}})
		case 5:
			for _, o := range r.f.Overdue(r.now, 100) {
				r.apply(&Expire{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: o.ID.Consumer, Epoch: o.Epoch, Ranges: o.Ranges})
			}
		case 6:
			r.setGroup("g", SetAckWait, ConsumerGroupSettings{AckWait: []int64{0, 1000, 3000}[rnd.IntN(3)]})
		}
		wantDeadlineBounds(t, r.f)
	}
}
