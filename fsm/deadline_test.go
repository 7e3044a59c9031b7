package fsm

import (
	"slices"
	"testing"
)

// A message handed out its group's most deliveries becomes a dead letter
// when it fails again, whether by a nack, a session expiry or an ack
// timeout.
func TestDeadLetterAtMaxDeliveries(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetMaxDeliveries|SetAckWait, GroupSettings{MaxDeliveries: 2, AckWait: 1000})
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
	r.setGroup("g", SetAckWait, GroupSettings{AckWait: 1000})
	r.sendN("s", 3)
	t0 := r.now
	r.pullN("g", "c", 1) // deadline t0+1000
	r.now = t0 + 500
	r.pullN("g", "c", 1) // deadline t0+1500
	r.pullN("g", "c", 1) // deadline t0+1500, extended below
	r.now = t0 + 800
	ext := resultAs[*ExtendResult](t, r.apply(&Extend{Now: r.now, Subject: "s", Group: "g", Consumer: "c", Ranges: []AckRange{one(2)}}))
	if ext.Extended != 1 {
		t.Fatalf("extend: %+v", ext)
	}
	r.now = t0 + 999
	if res := r.expire("g", "c", AckRange{0, 2}); res.Expired != 0 {
		t.Fatalf("expire before any deadline: %+v", res)
	}
	r.now = t0 + 1000
	if res := r.expire("g", "c", AckRange{0, 2}); res.Expired != 1 {
		t.Fatalf("expire at the first deadline: %+v", res)
	}
	r.now = t0 + 1500
	if res := r.expire("g", "c", AckRange{0, 2}); res.Expired != 1 {
		t.Fatalf("expire at the second deadline (the third was extended): %+v", res)
	}
	r.now = t0 + 1799
	if res := r.expire("g", "c", AckRange{0, 2}); res.Expired != 0 {
		t.Fatalf("expire before the extended deadline: %+v", res)
	}
	r.now = t0 + 1800
	if res := r.expire("g", "c", AckRange{0, 2}); res.Expired != 1 {
		t.Fatalf("expire at the extended deadline: %+v", res)
	}
	if got := consumeSeqs(r.pullN("g", "c2", 10)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("expired entries handed again: %v", got)
	}
}

// Overdue finds the consumers whose entries passed their ack wait; one
// whose overdue entries were acked meanwhile is named with no ranges, and
// the Expire proposed for it brings its deadline up to date, so it is not
// named again.
func TestOverdue(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, GroupSettings{AckWait: 1000})
	r.sendN("s", 4)
	t0 := r.now
	r.pullN("g", "a", 2)
	r.pullN("g", "b", 2)
	r.ack("g", "b", AckRange{0, 1})
	if got := r.f.Overdue(t0+999, 100); len(got) != 0 {
		t.Fatalf("overdue before the deadline: %+v", got)
	}
	got := r.f.Overdue(t0+1000, 100)
	if len(got) != 2 || got[0].ID.Consumer != "a" || !slices.Equal(got[0].Ranges, []AckRange{{0, 1}}) ||
		got[1].ID.Consumer != "b" || len(got[1].Ranges) != 0 {
		t.Fatalf("overdue: %+v", got)
	}
	if got := r.f.Overdue(t0+1000, 1); len(got) != 1 || !slices.Equal(got[0].Ranges, []AckRange{{0, 0}}) {
		t.Fatalf("overdue with limit 1: %+v", got)
	}
	r.now = t0 + 1000
	for _, o := range got {
		resultAs[*ExpireResult](t, r.apply(&Expire{Now: r.now, Subject: "s", Group: "g", Consumer: o.ID.Consumer, Epoch: o.Epoch, Ranges: o.Ranges}))
	}
	if got := r.f.Overdue(t0+5000, 100); len(got) != 0 {
		t.Fatalf("overdue after the expires: %+v", got)
	}
}

// An entry handed out while the group had no ack wait gets a deadline
// when extended after one is set, and Overdue finds it.
func TestExtendGivesADeadlineOverdueFinds(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetAckWait, GroupSettings{AckWait: 0})
	r.sendN("s", 1)
	r.pullN("g", "c", 1)
	r.setGroup("g", SetAckWait, GroupSettings{AckWait: 1000})
	resultAs[*ExtendResult](t, r.apply(&Extend{Now: r.now, Subject: "s", Group: "g", Consumer: "c", Ranges: []AckRange{one(0)}}))
	got := r.f.Overdue(r.now+1000, 100)
	if len(got) != 1 || !slices.Equal(got[0].Ranges, []AckRange{one(0)}) {
		t.Fatalf("overdue after the extend: %+v", got)
	}
}

// A consumer holds at most the group's MaxInFlight unacked entries.
func TestMaxInFlight(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetMaxInFlight, GroupSettings{MaxInFlight: 2})
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
	r.setGroup("g", SetAckWait, GroupSettings{AckWait: 1000})
	r.sendN("s", 3)
	p := r.pull(Pull{Subject: "s", Group: "g", Consumer: "c", Max: 2, AtMostOnce: true})
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
