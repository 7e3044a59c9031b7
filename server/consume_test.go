package server

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// qmq_messages_nacked_total counts messages, not the ranges that named
// them: one nack of a range of five messages counts five.
func TestNackedMetricCountsMessages(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	var msgs []*message.Message
	for i := range 5 {
		msgs = append(msgs, &message.Message{ID: string(rune('a' + i)), Subject: "s", CreatedAt: 1})
	}
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: msgs}).Encode()); err != nil {
		t.Fatal(err)
	}
	body, err := gc.Call(ctx, transport.TypePull, (&transport.PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5,
		Wait: time.Second, Start: transport.StartEarliest}).Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil || len(resp.Messages) != 5 {
		t.Fatalf("pull: %+v, %v", resp, err)
	}
	nack := &transport.NackRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: resp.Epoch, Ranges: []message.AckRange{{First: 0, Last: 4}}}
	if _, err := gc.Call(ctx, transport.TypeNack, nack.Encode()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(n.metrics.nacked); got != 5 {
		t.Fatalf("qmq_messages_nacked_total %v after one nack of five messages, want 5", got)
	}
}

// A registration creates the consumer's group at its start position and
// registers the consumer, handing out nothing even from a backlog: the
// consumer's pulls then find the group where its start put it.
func TestRegisterConsumerHandsOutNothing(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 3)
	gc := clientOf(t, n.ClientAddr())
	ctx := ctxFor(t, 30*time.Second)
	for _, tc := range []struct {
		group string
		start transport.StartPosition
		want  int
	}{{"at-latest", transport.StartLatest, 0}, {"at-earliest", transport.StartEarliest, 3}} {
		req := &transport.PullRequest{Subject: "orders", ConsumerGroup: tc.group, Consumer: "c1", Max: 100, Start: tc.start}
		body, err := gc.Call(ctx, transport.TypeRegisterConsumer, req.Encode())
		if err != nil {
			t.Fatalf("%s: %v", tc.group, err)
		}
		reg, err := transport.DecodePullResponse(body)
		if err != nil || len(reg.Messages) != 0 || reg.Epoch == 0 {
			t.Fatalf("%s: registration answered %d messages, epoch %d, %v", tc.group, len(reg.Messages), reg.Epoch, err)
		}
		if !n.fsm.HasConsumerGroup("orders", tc.group) || n.fsm.Epoch(fsm.ConsumerID{Subject: "orders", ConsumerGroup: tc.group, Consumer: "c1"}) != reg.Epoch {
			t.Fatalf("%s: the registration made no group or consumer", tc.group)
		}
		req.Epoch = reg.Epoch
		body, err = gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		pulled, err := transport.DecodePullResponse(body)
		if err != nil || len(pulled.Messages) != tc.want {
			t.Fatalf("%s: the first pull after the registration got %d messages (%v), want %d", tc.group, len(pulled.Messages), err, tc.want)
		}
	}
}
