package server

import (
	"context"
	"testing"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// A consumer that acked everything and went away just as the leader
// changed is still forgotten: the new leader starts a session for every
// registered consumer, not only those holding messages (it used to keep
// such a consumer registered for good, and they piled up to the limit of
// a group's consumers).
func TestIdleConsumerForgottenAfterLeaderChange(t *testing.T) {
	nodes := startGroup(t, func(_ string, c *Config) { c.SessionTimeout = 500 * time.Millisecond })
	old := leaderOf(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, old.ClientAddr())
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*logs.Message{{ID: "x", Subject: "s", CreatedAt: 1}}}).Encode()); err != nil {
		t.Fatal(err)
	}
	body, err := gc.Call(ctx, transport.TypePull, (&transport.PullRequest{Subject: "s", Group: "g", Consumer: "gone", Max: 1}).Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	ack := &transport.AckRequest{Subject: "s", Group: "g", Consumer: "gone", Epoch: resp.Epoch, Ranges: []transport.AckRange{{First: 0, Last: 0}}}
	if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
		t.Fatal(err)
	}
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	id := fsm.ConsumerID{Subject: "s", Group: "g", Consumer: "gone"}
	waitFor(t, 10*time.Second, "the silent consumer forgotten by the new leader", func() bool {
		l := leaderOf(nodes)
		return l != nil && l != old && l.fsm.Epoch(id) == 0
	})
}

// A request naming a consumer the state machine does not know (a pull of
// a subject without messages, a heartbeat) leaves no session and no
// waiting channel behind on the leader.
func TestMadeUpNamesLeaveNothingBehind(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	gc := clientOf(t, n.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 100 {
		name := "made-up-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		pull := &transport.PullRequest{Subject: name, Group: name, Consumer: name, Max: 1}
		if _, err := gc.Call(ctx, transport.TypePull, pull.Encode()); err != nil {
			t.Fatal(err)
		}
		hb := &transport.HeartbeatRequest{Subject: "s", Group: name, Consumer: name}
		if _, err := gc.Call(ctx, transport.TypeHeartbeat, hb.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	n.sessions.mu.Lock()
	sessions := len(n.sessions.seen)
	n.sessions.mu.Unlock()
	n.notify.mu.Lock()
	channels := len(n.notify.ch)
	n.notify.mu.Unlock()
	if sessions != 0 || channels != 0 {
		t.Fatalf("100 made-up names left %d sessions and %d waiting channels", sessions, channels)
	}
}
