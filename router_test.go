package qmq

import (
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/transport"
)

func TestPickPrefersWritableAvailableGroupsInTurn(t *testing.T) {
	rt := &route{Route: transport.Route{Groups: []transport.GroupRoute{
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
	rt.Groups = rt.Groups[3:]
	if g := rt.pick(nil); g != "" {
		t.Fatalf("picked %s when only a drained group remains", g)
	}
}

// A chosen id goes to the group its hash names, whatever the route's turn,
// among the groups pick would choose from.
func TestPickForFollowsTheID(t *testing.T) {
	rt := &route{Route: transport.Route{Groups: []transport.GroupRoute{
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
	if seen["a"] == 0 || seen["b"] == 0 || seen["drained"] != 0 {
		t.Fatalf("ids spread %v, want over a and b only", seen)
	}
	if g := rt.pickFor("order-1", map[string]bool{"a": true}); g != "b" {
		t.Fatalf("picked %s while avoiding a, want b", g)
	}
	rt.Groups = rt.Groups[2:]
	if g := rt.pickFor("order-1", nil); g != "" {
		t.Fatalf("picked %s when only a drained group remains", g)
	}
}
