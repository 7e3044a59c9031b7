package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// pullAs pulls up to n entries of s/g by consumer c, as application app
// with its limit of consumers, from the earliest message of a new group.
func (r *groupRig) pullAs(app string, maxConsumers int, g, c string, n int) any {
	r.t.Helper()
	return r.apply(&Pull{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: c, Max: n, Start: StartEarliest, App: app, MaxConsumers: maxConsumers})
}

// checkDeadShares compares the dead letters' shares kept as they change
// with ones counted from the groups.
func checkDeadShares(t *testing.T, f *FSM) {
	t.Helper()
	count, total := map[string]int64{}, int64(0)
	for _, g := range f.st.groups {
		count[g.app] += int64(len(g.dead))
		total += int64(len(g.dead))
		if in := g.deadAt >= 0; in != (len(g.dead) > 0) {
			t.Fatalf("group %v holds %d dead letters, in its share's heap: %v", g.key, len(g.dead), in)
		}
	}
	if total != f.st.deadTotal {
		t.Fatalf("dead letters: %d in the groups, %d counted", total, f.st.deadTotal)
	}
	for app, n := range count {
		share := f.st.deadShares[app]
		if n == 0 && share != nil || n > 0 && (share == nil || share.count != n) {
			t.Fatalf("application %q: %d dead letters in its groups, share %+v", app, n, share)
		}
	}
	if len(f.st.deadShares) > len(count) {
		t.Fatalf("shares of applications without dead letters: %v", f.st.deadShares)
	}
}

// TestConsumersPerApplication: an application has at most its
// MaxConsumers registered at once in the broker group; other applications
// and consumers of none are not held back, a consumer that goes makes room,
// and a restart counts the same.
func TestConsumersPerApplication(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 3)
	for _, c := range []string{"c1", "c2"} {
		resultAs[*PullResult](t, r.pullAs("billing", 2, "g", c, 1))
	}
	before := stateBytes(r.f)
	res := r.pullAs("billing", 2, "h", "c3", 1)
	err, _ := res.(error)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "application billing has 2 consumers registered") {
		t.Fatalf("billing's third consumer: %v", res)
	}
	wantStateUnchanged(t, r.f, before)
	if r.f.st.groups[groupKey{"s", "h"}] != nil {
		t.Fatal("the refused pull created its group")
	}
	resultAs[*PullResult](t, r.pullAs("ops", 2, "g", "c3", 1))
	resultAs[*PullResult](t, r.pullAs("", 0, "g", "c4", 1))
	resultAs[*PullResult](t, r.pullAs("billing", 2, "g", "c1", 1)) // registered already
	if r.f.st.appConsumers["billing"] != 2 || r.f.st.appConsumers["ops"] != 1 || len(r.f.st.appConsumers) != 2 {
		t.Fatalf("consumers per application %v", r.f.st.appConsumers)
	}
	resultAs[*ReclaimResult](t, r.apply(&Reclaim{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c2"}))
	resultAs[*PullResult](t, r.pullAs("billing", 2, "h", "c3", 1))
	if g := r.f.st.groups[groupKey{"s", "h"}]; g == nil || g.app != "billing" {
		t.Fatalf("billing's new group %+v", g)
	}
	// A code that is not a name is refused.
	if res := r.pullAs("no name", 2, "g", "c9", 1); !errors.Is(res.(error), ErrInvalid) {
		t.Fatalf("a bad application code: %v", res)
	}
	// Restarted, the replica counts the same.
	takeSnapshot(t, r.f)
	before = stateBytes(r.f)
	r.f.Close()
	g := unitOpen(t, r.f.cfg)
	if !bytes.Equal(before, stateBytes(g)) || g.st.appConsumers["billing"] != 2 || g.st.groups[groupKey{"s", "h"}].app != "billing" {
		t.Fatalf("after a restart: consumers per application %v", g.st.appConsumers)
	}
	if res := applyAt(g, r.next(), &Pull{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: "c5", Max: 1, App: "billing", MaxConsumers: 2}); !errors.Is(res.(error), ErrLimit) {
		t.Fatalf("billing's third consumer after a restart: %v", res)
	}
}

// TestDeadLettersFairShare: at the broker group's bound of dead letters,
// one application's failing groups push out their own, never another's
// below an equal share; and the shares survive a restart.
func TestDeadLettersFairShare(t *testing.T) {
	lowerLimit(t, &maxDeadTotal, 12)
	r := newGroupRig(t)
	r.sendN("s", 12)
	kill := func(app, g string, seqs ...int64) {
		t.Helper()
		r.setGroup(g, SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
		for _, s := range seqs {
			r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: "c-" + g, Ranges: []message.AckRange{{First: s, Last: s}}})
		}
		checkDeadShares(t, r.f)
	}
	// Application A: two groups of six each fill the bound.
	for _, g := range []string{"a1", "a2"} {
		resultAs[*PullResult](t, r.pullAs("A", 10, g, "c-"+g, 12))
	}
	kill("A", "a1", 0, 1, 2, 3, 4, 5)
	kill("A", "a2", 0, 1, 2, 3, 4, 5)
	if r.f.st.deadTotal != 12 {
		t.Fatalf("total %d", r.f.st.deadTotal)
	}
	// B's group: each of its dead letters takes the oldest of A's group
	// holding the most, until B holds as many as A.
	resultAs[*PullResult](t, r.pullAs("B", 10, "b1", "c-b1", 12))
	kill("B", "b1", 0, 1, 2, 3, 4, 5, 6, 7)
	a, b := r.f.st.deadShares["A"].count, r.f.st.deadShares["B"].count
	if a+b != 12 || b < 6 || b > 7 {
		t.Fatalf("A holds %d dead letters, B %d: want an equal share", a, b)
	}
	if d1, d2 := len(r.dead("a1")), len(r.dead("a2")); d1+d2 != int(a) || d1-d2 > 1 || d2-d1 > 1 {
		t.Fatalf("A's groups hold %d and %d", d1, d2)
	}
	if info := r.group("b1"); info.DeadLetters != int(b) {
		t.Fatalf("b1 %+v", info)
	}
	// A purge, a resend and a forget keep the shares.
	r.deadOp("a1", DeadPurge, false, 5)
	r.deadOp("b1", DeadResend, true)
	checkDeadShares(t, r.f)
	r.apply(&Reclaim{Now: r.now, Subject: "s", ConsumerGroup: "a2", Consumer: "c-a2"})
	r.apply(&Forget{Now: r.now, Subject: "s", ConsumerGroup: "a2"})
	checkDeadShares(t, r.f)
	takeSnapshot(t, r.f)
	r.f.Close()
	g := unitOpen(t, r.f.cfg)
	checkDeadShares(t, g)
	if fmt.Sprint(g.st.deadShares["A"].count) != fmt.Sprint(len(r.dead("a1"))) {
		t.Fatalf("after a restart, A's share %d", g.st.deadShares["A"].count)
	}
}

// TestDeadSharesUnderRandomOperations: dead letters at both bounds under
// random nacks, purges, resends, forgets, resets and restarts of groups of
// several applications keep their shares and heaps exact.
func TestDeadSharesUnderRandomOperations(t *testing.T) {
	lowerLimit(t, &maxDeadTotal, 7)
	lowerLimit(t, &maxDeadPerGroup, 4)
	r := newGroupRig(t)
	r.sendN("s", 40)
	apps := []string{"A", "B", "", "C"}
	groups := []string{"g0", "g1", "g2", "g3", "g4", "g5"}
	rng := rand.New(rand.NewPCG(12345, 1))
	alive := map[string]bool{}
	full := 0
	for step := range 3000 {
		g := groups[rng.IntN(len(groups))]
		switch op := rng.IntN(10); {
		case op < 5:
			p, ok := r.pullAs(apps[rng.IntN(len(apps))], 100, g, "c-"+g, 3).(*PullResult)
			if !ok {
				continue
			}
			alive[g] = true
			if r.f.st.groups[groupKey{"s", g}].settings.MaxDeliveries != 1 {
				r.setGroup(g, SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
			}
			for _, e := range p.Entries {
				r.apply(&Nack{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: "c-" + g, Ranges: []message.AckRange{{First: e.PullSeq, Last: e.PullSeq}}})
			}
		case op == 5 && alive[g]:
			r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: g, Op: DeadPurge, Seqs: []int64{int64(rng.IntN(40))}})
		case op == 6 && alive[g]:
			r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: g, Op: DeadResend, All: true})
		case op == 7 && alive[g]:
			r.apply(&Reclaim{Now: r.now, Subject: "s", ConsumerGroup: g, Consumer: "c-" + g})
			r.apply(&Forget{Now: r.now, Subject: "s", ConsumerGroup: g})
			alive[g] = false
		case op == 8 && alive[g]:
			r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: g, To: StartEarliest})
		case op == 9 && step%50 == 0:
			takeSnapshot(t, r.f)
			r.f.Close()
			r.f = unitOpen(t, r.f.cfg)
		}
		checkDeadShares(t, r.f)
		if r.f.st.deadTotal == int64(maxDeadTotal) {
			full++
		}
		for app, sh := range r.f.st.deadShares {
			for i, gg := range sh.groups {
				if gg.deadAt != i || gg.app != app {
					t.Fatalf("step %d: heap index %d of %v says %d (application %q in share %q)", step, i, gg.key, gg.deadAt, gg.app, app)
				}
				if i > 0 && sh.groups.Less(i, (i-1)/2) {
					t.Fatalf("step %d: heap order broken at %d", step, i)
				}
			}
		}
	}
	if full < 100 {
		t.Fatalf("only %d steps at the total bound: the test proves little", full)
	}
}
