package qmq

import (
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/transport"
)

func TestPickPrefersWritableAvailableGroupsInTurn(t *testing.T) {
	rt := &route{Route: transport.Route{BrokerGroups: []transport.BrokerGroupRoute{
		{Name: "a", Writable: true, Available: true},
		{Name: "b", Writable: true, Available: true},
		{Name: "down", Writable: true, Available: false},
		{Name: "drained", Writable: false, Available: true},
	}}}
	seen := map[string]int{}
	for range 10 {
		seen[rt.pick(nil)]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Fatalf("picks %v, want a and b in turn", seen)
	}
	// A group that just failed is avoided while another will do.
	for range 4 {
		if g := rt.pick(map[string]bool{"a": true}); g != "b" {
			t.Fatalf("picked %s while avoiding a, want b", g)
		}
	}
	// With every available group avoided, an unavailable writable one is
	// tried; with all avoided, any writable one: never the drained group.
	if g := rt.pick(map[string]bool{"a": true, "b": true}); g != "down" {
		t.Fatalf("picked %s, want down", g)
	}
	if g := rt.pick(map[string]bool{"a": true, "b": true, "down": true}); g == "drained" || g == "" {
		t.Fatalf("picked %q with every writable group avoided", g)
	}
	rt.BrokerGroups = rt.BrokerGroups[3:]
	if g := rt.pick(nil); g != "" {
		t.Fatalf("picked %s when only a drained group remains", g)
	}
}

// A chosen id goes to the group its hash names, whatever the route's turn,
// among the groups pick would choose from.
func TestPickForFollowsTheID(t *testing.T) {
	rt := &route{Route: transport.Route{BrokerGroups: []transport.BrokerGroupRoute{
		{Name: "a", Writable: true, Available: true},
		{Name: "b", Writable: true, Available: true},
		{Name: "drained", Writable: false, Available: true},
	}}}
	seen := map[string]int{}
	for i := range 100 {
		id := fmt.Sprintf("order-%d", i)
		g := rt.pickFor(id, nil)
		for range 3 {
			rt.pick(nil) // another message's turn: the id's group stays
			if again := rt.pickFor(id, nil); again != g {
				t.Fatalf("id %s went to %s, then to %s", id, g, again)
			}
		}
		seen[g]++
	}
	// A drained group is asked too (it may hold the id from before).
	if seen["a"] == 0 || seen["b"] == 0 || seen["drained"] == 0 {
		t.Fatalf("ids spread %v, want over a, b and drained", seen)
	}
	for i := range 100 {
		id := fmt.Sprintf("order-%d", i)
		if g := rt.pickFor(id, map[string]bool{"drained": true}); g == "drained" || (rt.pickFor(id, nil) != "drained" && g != rt.pickFor(id, nil)) {
			t.Fatalf("id %s: %s once drained refused it", id, g)
		}
	}
	if g := rt.pickFor("order-1", map[string]bool{"a": true, "drained": true}); g != "b" {
		t.Fatalf("picked %s while avoiding a and drained, want b", g)
	}
	rt.BrokerGroups = rt.BrokerGroups[2:]
	if g := rt.pickFor("order-1", nil); g != "" {
		t.Fatalf("picked %s when only a drained group remains", g)
	}
}

// A broker group leaving a subject's candidates moves only the ids it
// held: a resend across the change goes where the first send went. With a
// hash modulo the number of groups, 3,363 of 6,684 ids whose group stayed
// moved when one of three left.
func TestPickForMovesOnlyTheIDsOfAGroupThatLeaves(t *testing.T) {
	groups := func(names ...string) *route {
		rt := &route{}
		for _, n := range names {
			rt.BrokerGroups = append(rt.BrokerGroups, transport.BrokerGroupRoute{Name: n, Writable: true, Available: true})
		}
		return rt
	}
	all, two := groups("g1", "g2", "g3"), groups("g1", "g3")
	const ids = 10_000
	seen, moved := map[string]int{}, 0
	for i := range ids {
		id := fmt.Sprintf("order-%d", i)
		before := all.pickFor(id, nil)
		seen[before]++
		after := two.pickFor(id, nil)
		if after == "g2" {
			t.Fatalf("id %s went to g2, which left", id)
		}
		if before != "g2" && after != before {
			moved++
		}
		if unavailable := all.pickFor(id, map[string]bool{"g2": true}); unavailable != after {
			t.Fatalf("id %s: %s with g2 avoided, %s with g2 gone", id, unavailable, after)
		}
	}
	if moved != 0 {
		t.Fatalf("%d ids whose group stayed moved when g2 left", moved)
	}
	for g, n := range seen {
		if n < ids/3-ids/20 || n > ids/3+ids/20 { // within 5 points of a third
			t.Errorf("group %s won %d of %d ids", g, n, ids)
		}
	}
	// Joining moves ids only to the group that joined.
	four := groups("g1", "g2", "g3", "g4")
	for i := range ids {
		id := fmt.Sprintf("order-%d", i)
		if before, after := all.pickFor(id, nil), four.pickFor(id, nil); after != before && after != "g4" {
			t.Fatalf("id %s moved from %s to %s when g4 joined", id, before, after)
		}
	}
}
