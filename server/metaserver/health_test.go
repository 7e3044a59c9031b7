package metaserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq/transport"
)

func leaderBeat(group, id string, term, applied uint64) *transport.BrokerHeartbeat {
	return &transport.BrokerHeartbeat{
		Status: transport.Status{ID: id, Group: group, State: "Leader", Term: term, AppliedIndex: applied, ClientAddr: id + ":6001"},
		Load:   transport.Load{MessageBytes: int64(applied) * 100}}
}

// TestHealthPresumesGroupsAliveForOneTimeout: a new leader, which has heard
// no heartbeat yet, calls every group available until one timeout has
// passed since it began leading, and names no leader for it.
func TestHealthPresumesGroupsAliveForOneTimeout(t *testing.T) {
	clk := newClock()
	h := newHealth(10*time.Second, clk.now)
	if g := h.group("g1"); !g.available || g.leader != "" {
		t.Fatalf("a group nobody reported on, at the start: %+v, want available and no leader", g)
	}
	clk.advance(10*time.Second - time.Millisecond)
	if !h.group("g1").available {
		t.Fatal("a group is unavailable before one timeout has passed")
	}
	clk.advance(time.Millisecond)
	if h.group("g1").available {
		t.Fatal("a group nobody reported on is still available after one timeout")
	}
	// reset (a new term's leader) starts the window again.
	h.reset()
	if !h.group("g1").available {
		t.Fatal("after reset, a group is not presumed available")
	}
}

// TestHealthFollowsTheLeadersHeartbeats: a group is available while a node
// calling itself leader has reported within the timeout; the leader of the
// highest term stands; followers' reports alone do not make it available.
func TestHealthFollowsTheLeadersHeartbeats(t *testing.T) {
	clk := newClock()
	h := newHealth(10*time.Second, clk.now)
	clk.advance(time.Minute) // past the presumption

	follower := leaderBeat("g1", "n2", 3, 9)
	follower.Status.State = "Follower"
	h.record(follower)
	if g := h.group("g1"); g.available || len(g.nodes) != 1 {
		t.Fatalf("a group only a follower reported on: %+v, want unavailable with one node", g)
	}

	h.record(leaderBeat("g1", "n1", 2, 40))
	h.record(leaderBeat("g1", "n3", 3, 50)) // elected since: its term is later
	h.record(leaderBeat("g2", "x1", 7, 1))  // another group's
	g := h.group("g1")
	if !g.available || g.leader != "n3" || g.leaderAddr != "n3:6001" || g.term != 3 || g.applied != 50 || g.load.MessageBytes != 5000 {
		t.Fatalf("g1: %+v, want n3 leading in term 3 at index 50", g)
	}
	// Whatever order the reports come in, the later term's leader stands.
	for i := range 16 {
		name := fmt.Sprintf("o%d", i)
		newer, older := leaderBeat(name, "new", 6, 1), leaderBeat(name, "old", 5, 1)
		if i%2 == 0 {
			h.record(newer)
			h.record(older)
		} else {
			h.record(older)
			h.record(newer)
		}
		if l := h.group(name).leader; l != "new" {
			t.Fatalf("%s: leader %q, want the one of the later term", name, l)
		}
	}
	if len(g.nodes) != 3 {
		t.Fatalf("g1 has %d nodes' heartbeats, want 3", len(g.nodes))
	}
	clk.advance(4 * time.Second)
	if age := h.age(g.nodes["n3"]); age != 4000 {
		t.Fatalf("age of n3's heartbeat %d ms, want 4000", age)
	}

	// n3 falls silent; n1's report is as old. Past the timeout the group is
	// unavailable, though its nodes are still listed.
	clk.advance(6 * time.Second)
	if g := h.group("g1"); g.available || g.leader != "" || len(g.nodes) != 3 {
		t.Fatalf("g1 with stale heartbeats: %+v, want unavailable, nodes kept", g)
	}
	h.record(leaderBeat("g1", "n1", 4, 60))
	if g := h.group("g1"); !g.available || g.leader != "n1" {
		t.Fatalf("g1 after a fresh heartbeat of n1: %+v", g)
	}

	h.forget("g1", "n1")
	if g := h.group("g1"); g.available || len(g.nodes) != 2 {
		t.Fatalf("g1 after its leader was forgotten: %+v, want unavailable with two nodes", g)
	}
	h.reset()
	if g := h.group("g2"); len(g.nodes) != 0 || g.leader != "" {
		t.Fatalf("g2 after reset: %+v, want no heartbeats", g)
	}
}
