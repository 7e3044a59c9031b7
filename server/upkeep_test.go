package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Consumers that acked all they pulled cost the leader's upkeep no Raft
// entry, however many ack waits pass: it used to propose an empty Expire
// for each, once an ack wait after its last pull.
func TestIdleConsumersProposeNoExpire(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	const consumers = 20
	sendBlobs(t, ctx, gc, consumers, 10)
	for i := range consumers {
		req := transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: fmt.Sprint("c", i), Max: 1, Wait: time.Second, Start: transport.StartEarliest}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil || len(resp.Messages) != 1 {
			t.Fatalf("consumer %d pulled %v, %v", i, resp, err)
		}
		ack := &transport.AckRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: req.Consumer, Epoch: resp.Epoch,
			Ranges: []message.AckRange{{First: resp.Messages[0].PullSeq, Last: resp.Messages[0].PullSeq}}}
		if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	g, _ := n.FSM().ConsumerGroup("blobs", "g")
	wait := g.Settings.AckWait
	last := n.raft.LastIndex()
	now := n.clock.now().UnixMilli()
	for k := int64(1); k <= 4; k++ {
		if !n.expireOverdue(ctx, now+k*wait) {
			t.Fatal("leadership lost")
		}
	}
	if got := n.raft.LastIndex(); got != last {
		t.Fatalf("%d idle consumers, four ack waits: %d Raft entries proposed, want none", consumers, got-last)
	}
}
