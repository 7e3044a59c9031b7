package fsm

import (
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// deadRig returns a rig whose group g has dead letters of consume-log
// sequences 0..n-1 (max deliveries 1, each nacked once).
func deadRig(t *testing.T, n int) *groupRig {
	r := newGroupRig(t)
	r.setGroup("g", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
	r.sendN("s", n)
	r.pullN("g", "c", n)
	if res := r.nack("g", "c", 0, message.AckRange{First: 0, Last: int64(n - 1)}); res.Dead != n {
		t.Fatalf("nack: %+v", res)
	}
	return r
}

func (r *groupRig) deadOp(g string, op DeadLetterOp, all bool, seqs ...int64) int {
	r.t.Helper()
	return resultAs[*DeadLettersResult](r.t, r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: g, Op: op, All: all, Seqs: seqs})).Done
}

func TestDeadLettersResendAndPurge(t *testing.T) {
	r := deadRig(t, 5)
	if done := r.deadOp("g", DeadResend, false, 1, 3, 9); done != 2 {
		t.Fatalf("resend of 1, 3 and 9: %d done", done)
	}
	if got := r.dead("g"); !slices.Equal(got, []int64{0, 2, 4}) {
		t.Fatalf("dead letters after the resend: %v", got)
	}
	p := r.pullN("g", "c2", 10)
	if !slices.Equal(consumeSeqs(p), []int64{1, 3}) || !slices.Equal(deliveriesOf(p), []uint32{1, 1}) {
		t.Fatalf("resent: %+v", p.Entries)
	}
	if done := r.deadOp("g", DeadPurge, false, 2); done != 1 {
		t.Fatalf("purge of 2: %d done", done)
	}
	if got := r.dead("g"); !slices.Equal(got, []int64{0, 4}) {
		t.Fatalf("dead letters after the purge: %v", got)
	}
	if done := r.deadOp("g", DeadResend, true); done != 2 {
		t.Fatalf("resend of all: %d done", done)
	}
	if got := consumeSeqs(r.pullN("g", "c3", 10)); !slices.Equal(got, []int64{0, 4}) {
		t.Fatalf("resent all: %v", got)
	}
	r.nack("g", "c3", 0, message.AckRange{First: 0, Last: 1})
	if done := r.deadOp("g", DeadPurge, true); done != 2 || len(r.dead("g")) != 0 || r.f.st.deadTotal != 0 {
		t.Fatalf("purge of all: %d done, %v left, total %d", done, r.dead("g"), r.f.st.deadTotal)
	}
	if p := r.pullN("g", "c3", 10); len(p.Entries) != 0 {
		t.Fatalf("purged dead letters handed out: %v", consumeSeqs(p))
	}
	before := stateBytes(r.f)
	wantInvalid(t, r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: "g", Op: 3, All: true}))
	wantInvalid(t, r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: "g", Op: DeadPurge, Seqs: []int64{-1}}))
	wantStateUnchanged(t, r.f, before)
}

// Dead letters are bounded per group and in all: at a group's bound its
// oldest goes, at the broker group's the oldest of the group holding the
// most (ties by name), counted by the group that lost it; so a group
// holding none still keeps its first.
func TestDeadLetterBounds(t *testing.T) {
	lowerLimit(t, &maxDeadPerGroup, 3)
	lowerLimit(t, &maxDeadTotal, 4)
	r := deadRig(t, 4)
	if got := r.dead("g"); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("dead letters past the group bound: %v", got)
	}
	if info := r.group("g"); info.DeadDropped != 1 || info.DeadLetters != 3 {
		t.Fatalf("group %+v", info)
	}
	// A second group: one under the total, then at it.
	r.setGroup("h", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
	r.pull(Pull{Subject: "s", ConsumerGroup: "h", Consumer: "c", Max: 3, Start: StartEarliest})
	r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "h", Consumer: "c", Ranges: []message.AckRange{one(0)}})
	if d, n := r.f.DeadLetters("s", "h", 0, 10); n != 1 || d[0].Seq != 0 || r.f.st.deadTotal != 4 {
		t.Fatalf("h at the total bound: %+v of %d, total %d", d, n, r.f.st.deadTotal)
	}
	// Past the total: g, holding the most, gives its oldest.
	r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "h", Consumer: "c", Ranges: []message.AckRange{one(1)}})
	if got := r.dead("h"); !slices.Equal(got, []int64{0, 1}) || !slices.Equal(r.dead("g"), []int64{2, 3}) || r.f.st.deadTotal != 4 {
		t.Fatalf("h past the total bound: h %v, g %v, total %d", got, r.dead("g"), r.f.st.deadTotal)
	}
	// A group with none at the total bound keeps its first: g and h hold
	// two each, and g comes first by name.
	r.setGroup("k", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
	r.pull(Pull{Subject: "s", ConsumerGroup: "k", Consumer: "c", Max: 1, Start: StartEarliest})
	r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "k", Consumer: "c", Ranges: []message.AckRange{one(0)}})
	if info, _ := r.f.ConsumerGroup("s", "k"); info.DeadLetters != 1 || info.DeadDropped != 0 || r.f.st.deadTotal != 4 {
		t.Fatalf("k: %+v, total %d", info, r.f.st.deadTotal)
	}
	if info := r.group("g"); !slices.Equal(r.dead("g"), []int64{3}) || info.DeadDropped != 3 {
		t.Fatalf("g gave its oldest: %v, %+v", r.dead("g"), info)
	}
	// Forgetting a group gives its share of the total back.
	r.apply(&Forget{Now: r.now, Subject: "s", ConsumerGroup: "g"})
	if r.f.st.deadTotal != 3 {
		t.Fatalf("total after forgetting g: %d", r.f.st.deadTotal)
	}
}

// Forget with IdleFor forgets a group only once it has had no consumer
// that long; IdleGroups names the groups past their idle expiry.
func TestIdleGroups(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 1)
	r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, IdleExpiry: 2000})
	r.pull(Pull{Subject: "s", ConsumerGroup: "never", Consumer: "c", Max: 1})
	forget := func(idleFor int64) bool {
		return resultAs[*ForgetResult](t, r.apply(&Forget{Now: r.now, Subject: "s", ConsumerGroup: "g", IdleFor: idleFor})).Known
	}
	if forget(1) {
		t.Fatal("a group with a consumer forgotten as idle")
	}
	r.now += 5000
	if got := r.f.IdleConsumerGroups(r.now + 1_000_000); len(got) != 0 {
		t.Fatalf("idle groups with consumers: %+v", got)
	}
	reclaimAt(t, r.f, r.next(), r.now, "s", "g", "c")
	reclaimAt(t, r.f, r.next(), r.now, "s", "never", "c")
	idle := r.now
	if got := r.f.IdleConsumerGroups(idle + 1999); len(got) != 0 {
		t.Fatalf("idle groups before the expiry: %+v", got)
	}
	if got := r.f.IdleConsumerGroups(idle + 2000); len(got) != 1 || got[0] != (IdleConsumerGroup{Subject: "s", ConsumerGroup: "g", IdleFor: 2000}) {
		t.Fatalf("idle groups at the expiry: %+v", got)
	}
	r.now = idle + 1999
	if forget(2000) {
		t.Fatal("forgotten before idle that long")
	}
	r.now = idle + 2000
	if !forget(2000) {
		t.Fatal("not forgotten when idle that long")
	}
	if _, ok := r.f.ConsumerGroup("s", "g"); ok {
		t.Fatal("the group is still known")
	}
	wantInvalid(t, r.apply(&Forget{Now: r.now, Subject: "s", ConsumerGroup: "never", IdleFor: -1}))
}
