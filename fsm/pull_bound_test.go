package fsm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
)

// sizedRig is a group rig whose subject s holds messages of the given body
// sizes; it returns their record sizes, which a bounded pull adds up.
func sizedRig(t *testing.T, bodies ...int) (*groupRig, []int) {
	r := newGroupRig(t)
	var msgs []*message.Message
	for i, n := range bodies {
		msgs = append(msgs, unitMsg(fmt.Sprint("m", i), "s", n))
	}
	appendAt(t, r.f, r.next(), r.now, msgs...)
	sizes := make([]int, len(bodies))
	for i := range sizes {
		at, err := r.f.Locate("s", int64(i))
		if err != nil {
			t.Fatal(err)
		}
		sizes[i] = at.Size
	}
	return r, sizes
}

// A pull with MaxBytes hands out, from the cursor, exactly the entries
// whose messages fit in it, with where each lies; when not even the first
// fits it hands out nothing, changes nothing, and says what it needs. What
// is not handed out stays at the cursor.
func TestPullHandsOutWhatFitsItsBytes(t *testing.T) {
	r, sizes := sizedRig(t, 100, 200, 300, 5000, 100, 100)
	pull := func(max int, maxBytes int64) *PullResult {
		t.Helper()
		res := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: max, Start: StartEarliest, MaxBytes: maxBytes, AtMostOnce: true})
		if !res.Located {
			t.Fatal("a pull bounded in bytes did not locate its entries")
		}
		for _, e := range res.Entries {
			if at, _ := r.f.Locate("s", e.ConsumeSeq); e.At != at {
				t.Fatalf("entry %d: at %+v, the consume log says %+v", e.ConsumeSeq, e.At, at)
			}
		}
		return res
	}
	// 100 + 200 fit, 300 more would not.
	if got := consumeSeqs(pull(10, int64(sizes[0]+sizes[1]+sizes[2]-1))); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("pull of %d bytes handed out %v, want 0 1", sizes[0]+sizes[1]+sizes[2]-1, got)
	}
	// Exactly its size fits.
	if got := consumeSeqs(pull(10, int64(sizes[2]))); !slices.Equal(got, []int64{2}) {
		t.Fatalf("pull of %d bytes handed out %v, want 2", sizes[2], got)
	}
	// Larger than the bound: nothing, and the bytes it needs.
	before := stateBytes(r.f)
	if res := pull(10, 1); len(res.Entries) != 0 || res.Need != int64(sizes[3]) {
		t.Fatalf("pull of 1 byte handed out %v, need %d; want nothing and %d", consumeSeqs(res), res.Need, sizes[3])
	}
	wantStateUnchanged(t, r.f, before)
	if got := consumeSeqs(pull(10, int64(sizes[3]))); !slices.Equal(got, []int64{3}) {
		t.Fatalf("pull of the %d bytes it needed handed out %v, want 3", sizes[3], got)
	}
	// The count still bounds it.
	if got := consumeSeqs(pull(1, 1<<20)); !slices.Equal(got, []int64{4}) {
		t.Fatalf("pull of one entry handed out %v, want 4", got)
	}
	if g := r.group("g"); g.Cursor != 5 || g.Backlog != 1 {
		t.Fatalf("cursor %d, backlog %d; want 5 and 1", g.Cursor, g.Backlog)
	}
}

// An at-least-once entry a bounded pull does not hand out starts no ack
// wait and counts no delivery: it is the group's, as if never pulled.
// Redeliveries and resends are bounded alike.
func TestEntriesNotHandedOutStartNoAckWait(t *testing.T) {
	r, sizes := sizedRig(t, 1000, 1000, 1000, 1000)
	two := int64(sizes[0] + sizes[1])
	res := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Start: StartEarliest, MaxBytes: two})
	if got := consumeSeqs(res); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("handed out %v, want 0 1", got)
	}
	if g := r.group("g"); g.Unacked != 2 || g.Cursor != 2 {
		t.Fatalf("unacked %d, cursor %d; want 2 and 2", g.Unacked, g.Cursor)
	}
	// Past the ack wait only what was handed out is overdue.
	r.now += DefaultConsumerGroupSettings().AckWait
	over := r.f.Overdue(r.now, 100)
	if len(over) != 1 || !slices.Equal(over[0].Ranges, []message.AckRange{{First: 0, Last: 1}}) {
		t.Fatalf("overdue %+v, want pull sequences 0..1", over)
	}
	// A lost reply: the consumer asks from 0 again, with room for one; with
	// room for none it is handed nothing and told what one needs.
	one := int64(sizes[0])
	res = r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Resend: true, From: 0, MaxBytes: one})
	if len(res.Entries) != 1 || res.Entries[0].PullSeq != 0 || res.Entries[0].Deliveries != 1 {
		t.Fatalf("resend with room for one: %+v, want pull sequence 0 alone", res.Entries)
	}
	if res = r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Resend: true, From: 0, MaxBytes: 1}); len(res.Entries) != 0 || res.Need != one {
		t.Fatalf("resend of one byte: %+v, need %d", res.Entries, res.Need)
	}
	// Timed out, 0 and 1 are due again; a pull with room for one takes 0,
	// and 1 stays queued with its one delivery.
	r.expire("g", "c", message.AckRange{First: 0, Last: 1})
	res = r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, From: 2, Resend: true, MaxBytes: one})
	if got := consumeSeqs(res); !slices.Equal(got, []int64{0}) || res.Entries[0].Deliveries != 2 {
		t.Fatalf("redelivery with room for one: %+v, want 0 (second delivery) alone", res.Entries)
	}
	if g := r.group("g"); g.Redeliver != 1 || g.Unacked != 1 || g.Cursor != 2 {
		t.Fatalf("redeliver %d, unacked %d, cursor %d; want 1, 1, 2", g.Redeliver, g.Unacked, g.Cursor)
	}
	res = r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, From: 3, Resend: true, MaxBytes: 1 << 20})
	if got, d := consumeSeqs(res), deliveriesOf(res); !slices.Equal(got, []int64{1, 2, 3}) || !slices.Equal(d, []uint32{2, 1, 1}) {
		t.Fatalf("then: %v with deliveries %v, want 1 2 3 with 2 1 1", got, d)
	}
}

// A bounded pull in the batch that appended its entries reads them: they
// are not yet flushed when it applies.
func TestBoundedPullInTheBatchOfItsAppend(t *testing.T) {
	f := unitFSM(t)
	out := f.ApplyBatch([]*raft.Log{
		unitEntry(1, &Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 500), unitMsg("b", "s", 500), unitMsg("c", "s", 500)}}),
		unitEntry(2, &Pull{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Start: StartEarliest, MaxBytes: 1100}),
	})
	res := resultAs[*PullResult](t, out[1])
	if got := consumeSeqs(res); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("handed out %v, want 0 1", got)
	}
	for _, e := range res.Entries {
		if at, _ := f.Locate("s", e.ConsumeSeq); e.At != at {
			t.Fatalf("entry %d: at %+v, the consume log says %+v", e.ConsumeSeq, e.At, at)
		}
	}
}

// Pulls before version 4 have no byte bound and read nothing: a replica
// replaying one does what the build that applied it did.
func TestPullsBeforeVersion4HaveNoByteBound(t *testing.T) {
	r, _ := sizedRig(t, 1000, 1000, 1000)
	res := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Start: StartEarliest, version: commandVersionPull3})
	if got := consumeSeqs(res); !slices.Equal(got, []int64{0, 1, 2}) || res.Located {
		t.Fatalf("version 3 pull: %v located %v, want 0 1 2 unlocated", got, res.Located)
	}
}

// PullBytes, the leader's estimate of a pull's reply, adds up the record
// sizes of what the pull would reach: its resends, the redelivery queue,
// then the cursor, up to Max entries and limit bytes; limit when it cannot
// tell.
func TestPullBytesEstimatesWhatAPullReaches(t *testing.T) {
	r, sizes := sizedRig(t, 100, 200, 300, 400, 500)
	sum := func(idx ...int) int64 {
		var n int64
		for _, i := range idx {
			n += int64(sizes[i])
		}
		return n
	}
	p := &Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 2}
	if got := r.f.PullBytes(p, 1<<20); got != 1<<20 {
		t.Fatalf("a group not yet known: %d, want the limit", got)
	}
	r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 2, Start: StartEarliest}) // hands 0 and 1
	if got, want := r.f.PullBytes(p, 1<<20), sum(2, 3); got != want {
		t.Fatalf("from the cursor: %d, want %d", got, want)
	}
	if got := r.f.PullBytes(p, 10); got != 10 {
		t.Fatalf("bounded by 10: %d", got)
	}
	// A lost reply: asked from 0, it would resend 0 and 1.
	if got, want := r.f.PullBytes(&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 3, Resend: true}, 1<<20), sum(0, 1, 2); got != want {
		t.Fatalf("with resends: %d, want %d", got, want)
	}
	r.nack("g", "c", r.now, message.AckRange{First: 1, Last: 1}) // 1 is due again at once
	if got, want := r.f.PullBytes(&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "other", Max: 3}, 1<<20), sum(1, 2, 3); got != want {
		t.Fatalf("with a redelivery: %d, want %d", got, want)
	}
	if got := r.f.PullBytes(&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 3, Tags: []string{"t"}}, 1<<20); got != 1<<20 {
		t.Fatalf("a tag filter: %d, want the limit", got)
	}
	if got := r.f.PullBytes(&Pull{Subject: "none", ConsumerGroup: "g", Consumer: "c", Max: 3}, 1<<20); got != 0 {
		t.Fatalf("a subject without messages: %d, want 0", got)
	}
}
