package fsm

import (
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// redeliverAll has an unfiltered consumer of group g pull every message of
// s and nack them all due at once: they wait on the group's redelivery
// queue, in order.
func redeliverAll(t *testing.T, r *groupRig, n int) {
	t.Helper()
	if got := len(r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "any", Max: 100, Start: StartEarliest}).Entries); got != n {
		t.Fatalf("the unfiltered consumer pulled %d of %d", got, n)
	}
	r.nack("g", "any", r.now, message.AckRange{First: 0, Last: int64(n - 1)})
	if q := r.group("g").Redeliver; q != n {
		t.Fatalf("%d of %d due again", q, n)
	}
}

// A tag filter applies to redeliveries too: a consumer gets again only
// the messages its tags match, and those it does not match stay due for
// the group's consumers whose tags do (the filter used to apply only at
// the cursor, so a consumer asking for red could be handed a blue one
// again). Tags filter per consumer: entries a filter passes over at the
// cursor are consumed for the group, but a redelivery was handed out
// already, under a filter that matched it, and is still owed.
func TestTagFilterAppliesToRedeliveries(t *testing.T) {
	r := newGroupRig(t)
	red, blue := []string{"red"}, []string{"blue"}
	r.send("s", red, blue, red, nil)
	redeliverAll(t, r, 4)
	reds := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "reds", Max: 10, Tags: red})
	if got, d := consumeSeqs(reds), deliveriesOf(reds); !slices.Equal(got, []int64{0, 2}) || !slices.Equal(d, []uint32{2, 2}) {
		t.Fatalf("the red consumer got %v (deliveries %v), want 0 and 2 again", got, d)
	}
	if q := r.group("g").Redeliver; q != 2 {
		t.Fatalf("%d due again after the red consumer pulled, want the blue one and the untagged one", q)
	}
	blues := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "blues", Max: 10, Tags: blue})
	if got := consumeSeqs(blues); !slices.Equal(got, []int64{1}) {
		t.Fatalf("the blue consumer got %v, want 1", got)
	}
	rest := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "any", Max: 10})
	if got := consumeSeqs(rest); !slices.Equal(got, []int64{3}) {
		t.Fatalf("the unfiltered consumer got %v, want 3, which no filter matched", got)
	}
}

// A filtered pull looks at no more than maxRedeliveryTagScan redeliveries, moving
// those it passes over behind the others, so the next pull looks further:
// a long run of redeliveries it does not match neither costs one pull more
// than the bound nor hides the one it does.
func TestTagFilterRedeliveryScanBound(t *testing.T) {
	lowerLimit(t, &maxRedeliveryTagScan, 2)
	r := newGroupRig(t)
	red := []string{"red"}
	r.send("s", nil, nil, nil, red)
	redeliverAll(t, r, 4)
	pull := func() *PullResult {
		return r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "reds", Max: 10, Tags: red})
	}
	if p := pull(); len(p.Entries) != 0 || p.More {
		t.Fatalf("first pull: %+v, want nothing (and no More: it would pull again at once)", p)
	}
	if got := consumeSeqs(pull()); !slices.Equal(got, []int64{3}) {
		t.Fatalf("second pull: %v, want 3", got)
	}
	if q := r.group("g").Redeliver; q != 3 {
		t.Fatalf("%d due again, want the 3 untagged", q)
	}
}

// A version 3 pull hands out redeliveries whatever their tags, as the
// builds that applied it did: a replica replaying it must do the same.
func TestVersion3PullHandsOutRedeliveriesUnfiltered(t *testing.T) {
	r := newGroupRig(t)
	r.send("s", []string{"red"}, []string{"blue"})
	redeliverAll(t, r, 2)
	p := r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "reds", Max: 10, Tags: []string{"red"}, version: commandVersionPull3})
	if got := consumeSeqs(p); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("version 3 pull got %v, want 0 and 1", got)
	}
}
