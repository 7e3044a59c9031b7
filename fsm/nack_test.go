package fsm

import (
	"math"
	"slices"
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// A nacked message comes back through a retry record: to the group that
// nacked it and no other, not before its time, and once.
func TestNackRetryFiresToItsGroupOnce(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 3)
	if got := consumeSeqs(r.pullN("g1", "c", 3)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("g1 pulled %v", got)
	}
	r.pullN("g2", "c", 3)
	r.ack("g2", "c", message.AckRange{First: 0, Last: 2})
	due := r.now + 10_000
	if res := r.nack("g1", "c", due, one(1)); res.Retried != 1 || res.Dead != 0 {
		t.Fatalf("nack: %+v", res)
	}
	if len(r.sched) != 1 || r.sched[0].At != due {
		t.Fatalf("scheduled %+v, want one retry due at %d", r.sched, due)
	}
	if info := r.group("g1"); info.Retrying != 1 || info.Unacked != 2 {
		t.Fatalf("g1 after the nack: %+v", info)
	}
	ref := r.sched[0].Ref
	r.now = due - 1
	if res := r.fire(ref); res.Fired != 0 || res.Passed != 1 {
		t.Fatalf("fire before due: %+v", res)
	}
	if got := r.pullN("g1", "c2", 10); len(got.Entries) != 0 {
		t.Fatalf("g1 got %v before the retry was due", consumeSeqs(got))
	}
	r.now = due
	if res := r.fire(ref); res.Fired != 1 || !slices.Equal(res.Subjects, []string{"s"}) {
		t.Fatalf("fire when due: %+v", res)
	}
	if res := r.fire(ref); res.Fired != 0 || res.Passed != 1 {
		t.Fatalf("fire again: %+v", res)
	}
	if got := r.pullN("g2", "c", 10); len(got.Entries) != 0 {
		t.Fatalf("g2 got %v: another group's retry", consumeSeqs(got))
	}
	got := r.pullN("g1", "c2", 10)
	if !slices.Equal(consumeSeqs(got), []int64{1}) || !slices.Equal(deliveriesOf(got), []uint32{2}) {
		t.Fatalf("g1 after the retry: %+v", got.Entries)
	}
	if got := r.pullN("g1", "c3", 10); len(got.Entries) != 0 {
		t.Fatalf("the retry was handed out twice: %v", consumeSeqs(got))
	}
	if info := r.group("g1"); info.Retrying != 0 {
		t.Fatalf("g1 still retrying: %+v", info)
	}
}

func TestRetryDelayDoublesToItsCap(t *testing.T) {
	s := ConsumerGroupSettings{RetryFirst: 5000, RetryMax: 60_000}
	for deliveries, want := range map[uint32]int64{0: 5000, 1: 5000, 2: 10_000, 3: 20_000, 4: 40_000, 5: 60_000, 6: 60_000, 10_000: 60_000} {
		if got := s.retryDelay(deliveries); got != want {
			t.Errorf("retryDelay(%d) = %d, want %d", deliveries, got, want)
		}
	}
	if got := (ConsumerGroupSettings{RetryFirst: 0, RetryMax: 1000}).retryDelay(5); got != 0 {
		t.Errorf("no backoff: %d", got)
	}
	if got := (ConsumerGroupSettings{RetryFirst: maxRetryDelay, RetryMax: maxRetryDelay}).retryDelay(limits.MaxDeliveries); got != maxRetryDelay {
		t.Errorf("largest backoff: %d", got)
	}
}

// A nack without a retry time waits the group's backoff for the message's
// deliveries; one with a retry time waits until then, or none if it has
// passed; one too far ahead is refused.
func TestNackRetryTimes(t *testing.T) {
	r := newGroupRig(t)
	r.setGroup("g", SetRetryFirst|SetRetryMax, ConsumerGroupSettings{RetryFirst: 1000, RetryMax: 3000})
	r.sendN("s", 2)
	r.pullN("g", "c", 1)
	r.nack("g", "c", 0, one(0))
	// Deliveries 1, 2, 3, 4: 1 s, 2 s, 3 s (the cap), 3 s.
	for i, want := range []int64{1000, 2000, 3000, 3000} {
		e := r.sched[len(r.sched)-1]
		if e.At != r.now+want {
			t.Fatalf("retry %d due at now+%d, want now+%d", i+1, e.At-r.now, want)
		}
		r.now = e.At
		r.fire(e.Ref)
		p := r.pullN("g", "c", 1)
		if !slices.Equal(deliveriesOf(p), []uint32{uint32(i + 2)}) {
			t.Fatalf("retry %d handed out %+v", i+1, p.Entries)
		}
		if i < 3 {
			r.nack("g", "c", 0, one(p.Entries[0].PullSeq))
		}
	}
	// An explicit time is honoured.
	p := r.pullN("g", "c", 1)
	n := len(r.sched)
	at := r.now + 123_456
	r.nack("g", "c", at, one(p.Entries[0].PullSeq))
	if len(r.sched) != n+1 || r.sched[n].At != at {
		t.Fatalf("retry at %d scheduled %+v", at, r.sched[n:])
	}
	// A time already passed hands it out again at once, without a record.
	r.pullN("h", "c", 1)
	n = len(r.sched)
	if res := r.nack("h", "c", r.now-1, one(0)); res.Retried != 1 || len(r.sched) != n {
		t.Fatalf("nack with a passed time: %+v, %d records scheduled", res, len(r.sched)-n)
	}
	if p := r.pullN("h", "c", 1); !slices.Equal(consumeSeqs(p), []int64{0}) || !slices.Equal(deliveriesOf(p), []uint32{2}) {
		t.Fatalf("after a nack with a passed time: %+v", p.Entries)
	}
	// At the largest delay it is accepted; past it, or negative, refused
	// without changing the state.
	r.nack("h", "c", r.now+maxRetryDelay, one(1))
	if e := r.sched[len(r.sched)-1]; e.At != r.now+maxRetryDelay {
		t.Fatalf("retry at the largest delay scheduled at %d", e.At)
	}
	r.pullN("h", "c", 1)
	before := stateBytes(r.f)
	for _, bad := range []int64{-1, r.now + maxRetryDelay + 1} {
		wantInvalid(t, r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "h", Consumer: "c", RetryAt: bad, Ranges: []message.AckRange{one(2)}}))
	}
	wantStateUnchanged(t, r.f, before)
}

// A retry due past the last hour a schedule reference can name is handed
// out again at once rather than stopping the replica.
func TestNackRetryPastTheLastHour(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 1)
	r.pullN("g", "c", 1)
	r.now = (int64(1)<<20)*delaywheel.HourMillis - 1000
	if res := r.nack("g", "c", 0, one(0)); res.Retried != 1 || len(r.sched) != 0 {
		t.Fatalf("nack: %+v, scheduled %+v", res, r.sched)
	}
	if p := r.pullN("g", "c", 1); !slices.Equal(consumeSeqs(p), []int64{0}) {
		t.Fatalf("pulled %v", consumeSeqs(p))
	}
}

// A leader time near the largest does not overflow the retry-time bound:
// a retry a moment later is accepted (and, past the last hour a reference
// can name, handed out again at once); one more than the bound ahead is
// refused.
func TestNackRetryBoundAtTheLargestTime(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 2)
	r.pullN("g", "c", 2)
	r.now = math.MaxInt64 - 10
	if res := r.nack("g", "c", r.now+5, one(0)); res.Retried != 1 {
		t.Fatalf("nack due 5 ms after a time near the largest: %+v", res)
	}
	before := stateBytes(r.f)
	wantInvalid(t, r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c", RetryAt: -1, Ranges: []message.AckRange{one(1)}}))
	wantStateUnchanged(t, r.f, before)
}

// A nack says how many of its entries are due again at once (those the
// leader wakes waiting pulls for), apart from those waiting for a retry
// time and the dead.
func TestNackSaysWhatIsDueAtOnce(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 3)
	r.pullN("g", "c", 3)
	if res := r.nack("g", "c", 0, one(0)); res.Retried != 1 || res.Due != 0 {
		t.Fatalf("nack on the group's backoff: %+v, want 1 retried, 0 due at once", res)
	}
	if res := r.nack("g", "c", r.now, one(1)); res.Retried != 1 || res.Due != 1 {
		t.Fatalf("nack due now: %+v, want 1 retried, 1 due at once", res)
	}
}
