package server

import (
	"context"
	"testing"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
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
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{{ID: "x", Subject: "s", CreatedAt: 1}}}).Encode()); err != nil {
		t.Fatal(err)
	}
	body, err := gc.Call(ctx, transport.TypePull, (&transport.PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "gone", Max: 1, Start: transport.StartEarliest}).Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	ack := &transport.AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "gone", Epoch: resp.Epoch, Ranges: []message.AckRange{{First: 0, Last: 0}}}
	if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
		t.Fatal(err)
	}
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	id := fsm.ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "gone"}
	waitFor(t, 10*time.Second, "the silent consumer forgotten by the new leader", func() bool {
		l := leaderOf(nodes)
		return l != nil && l != old && l.fsm.Epoch(id) == 0
	})
}

// Names a client makes up leave nothing behind on the leader: a pull of a
// subject without messages registers its consumer and group (a group
// starting at the latest message must receive the first one), but no
// waiting channel; once the session expires both are forgotten. A
// heartbeat of a consumer the state machine does not know adds nothing.
func TestMadeUpNamesLeaveNothingBehind(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.SessionTimeout = 300 * time.Millisecond })
	waitLeader(t, n)
	gc := clientOf(t, n.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 100 {
		name := "made-up-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		pull := &transport.PullRequest{Subject: name, ConsumerGroup: name, Consumer: name, Max: 1}
		if _, err := gc.Call(ctx, transport.TypePull, pull.Encode()); err != nil {
			t.Fatal(err)
		}
		hb := &transport.HeartbeatRequest{Subject: "s", ConsumerGroup: name, Consumer: name}
		if _, err := gc.Call(ctx, transport.TypeHeartbeat, hb.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	n.notify.mu.Lock()
	channels := len(n.notify.ch)
	n.notify.mu.Unlock()
	if channels != 0 {
		t.Fatalf("100 made-up names left %d waiting channels", channels)
	}
	waitFor(t, 20*time.Second, "the made-up consumers and groups forgotten", func() bool {
		n.sessions.mu.Lock()
		sessions := len(n.sessions.seen)
		n.sessions.mu.Unlock()
		return sessions == 0 && len(n.fsm.Consumers()) == 0 && len(n.fsm.ConsumerGroups()) == 0
	})
}
