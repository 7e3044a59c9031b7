package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// TestFollowerThatMovedHasItsAddressRecorded: a follower restarted on
// another client port asks the leader to record it, so that the group's
// state (and a new leader reading its voters' clocks) finds it there.
func TestFollowerThatMovedHasItsAddressRecorded(t *testing.T) {
	nodes := startGroup(t)
	leader := leaderOf(nodes)
	var f *Node
	for _, n := range nodes {
		if n != leader {
			f = n
		}
	}
	f.Close()
	moved, err := New(f.cfg) // ClientAddr 127.0.0.1:0: another port
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { moved.Close() })
	if moved.ClientAddr() == f.ClientAddr() {
		t.Fatalf("restarted on the same client address %s", f.ClientAddr())
	}
	waitFor(t, 10*time.Second, "the moved follower's address in the leader's state", func() bool {
		return leader.fsm.MemberAddr(f.cfg.ID) == moved.ClientAddr()
	})
}

// TestVotersWithoutTheTimeRequestDoNotStallALeader: a voter of an older
// version answers the time request UNKNOWN_TYPE; with it, a new leader
// that cannot read the other voter's clock still has a quorum of answers
// and serves (the older voter counts as agreeing with its clock).
func TestVotersWithoutTheTimeRequestDoNotStallALeader(t *testing.T) {
	nodes := startGroup(t)
	n1 := leaderOf(nodes)
	var others []*Node
	for _, n := range nodes {
		if n != n1 {
			others = append(others, n)
		}
	}
	next, old := others[0], others[1]
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &transport.Server{Logger: testLogger(t, "older"), Handler: func(_ context.Context, typ transport.Type, _ []byte) ([]byte, error) {
		return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(typ))
	}}
	go fake.Serve(lis)
	t.Cleanup(func() { fake.Close() })
	old.Close() // the older node's address now answers from fake
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n1.propose(ctx, n1.setMember(old.cfg.ID, lis.Addr().String())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the next leader to apply the older node's address", func() bool {
		return next.fsm.MemberAddr(old.cfg.ID) == lis.Addr().String()
	})
	n1.client.Close() // its clock cannot be read
	if err := n1.raft.LeadershipTransferToServer(raft.ServerID(next.cfg.ID), raft.ServerAddress(next.cfg.RaftAddr)).Error(); err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	waitFor(t, 10*time.Second, "the next node to lead", next.isLeader)
	c := clientOf(t, next.ClientAddr())
	if got := sendRaw(t, c, &message.Message{ID: "after", Subject: "orders"}); got != transport.SendAppended {
		t.Fatalf("send: status %d, want appended", got)
	}
}
