package server

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHandOverLeadership: on the leader it returns once another voter
// leads; on a follower, and on a group's only voter, it returns nil and
// changes nothing.
func TestHandOverLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	solo := startNode(t, "solo", true, nil)
	waitLeader(t, solo)
	if err := solo.HandOverLeadership(ctx); err != nil || !solo.isLeader() {
		t.Fatalf("a group's only voter: %v, leader %v; want nil, still the leader", err, solo.isLeader())
	}

	nodes := startGroup(t)
	old := leaderOf(nodes)
	var follower *Node
	for _, n := range nodes {
		if n != old {
			follower = n
		}
	}
	term := old.Raft().CurrentTerm()
	if err := follower.HandOverLeadership(ctx); err != nil || leaderOf(nodes) != old || old.Raft().CurrentTerm() != term {
		t.Fatalf("a follower: %v; want nil and %s still leading in term %d", err, old.cfg.ID, term)
	}
	if err := old.HandOverLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	// Returned: another voter has won the election the transfer started.
	if old.Raft().State() == raft.Leader {
		t.Fatalf("%s still leads after handing leadership over", old.cfg.ID)
	}
	waitFor(t, 10*time.Second, "another node to lead", func() bool {
		l := leaderOf(nodes)
		return l != nil && l != old
	})
}
