package server

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qmqgo/qmq/logs"
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
	var msgs []*logs.Message
	for i := range 5 {
		msgs = append(msgs, &logs.Message{ID: string(rune('a' + i)), Subject: "s", CreatedAt: 1})
	}
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: msgs}).Encode()); err != nil {
		t.Fatal(err)
	}
	body, err := gc.Call(ctx, transport.TypePull, (&transport.PullRequest{Subject: "s", Group: "g", Consumer: "c", Max: 5,
		Wait: time.Second, Start: transport.StartEarliest}).Encode())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil || len(resp.Messages) != 5 {
		t.Fatalf("pull: %+v, %v", resp, err)
	}
	nack := &transport.NackRequest{Subject: "s", Group: "g", Consumer: "c", Epoch: resp.Epoch, Ranges: []transport.AckRange{{First: 0, Last: 4}}}
	if _, err := gc.Call(ctx, transport.TypeNack, nack.Encode()); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(n.metrics.nacked); got != 5 {
		t.Fatalf("qmq_messages_nacked_total %v after one nack of five messages, want 5", got)
	}
}
