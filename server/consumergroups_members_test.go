package server

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

// TestConsumerGroupMembers: the answer for one consumer group lists its
// consumers, which of them hold messages in flight, and how long ago the
// leader heard from each; a listing of groups lists none.
func TestConsumerGroupMembers(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	gc := clientOf(t, n.ClientAddr())
	for i := range 3 {
		sendRaw(t, gc, testmsg.OfSize(fmt.Sprint("m", i), "s", 0, 1024))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// pull has consumer pull max messages of group a and ack ack of them.
	pull := func(consumer string, max, ack int) {
		t.Helper()
		req := &transport.PullRequest{Subject: "s", ConsumerGroup: "a", Consumer: consumer, Max: max, Wait: 50 * time.Millisecond, Start: transport.StartEarliest}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil || len(resp.Messages) != max {
			t.Fatalf("%s pulled %d (%v), want %d", consumer, len(resp.Messages), err, max)
		}
		if ack > 0 {
			r := &transport.AckRequest{Subject: "s", ConsumerGroup: "a", Consumer: consumer, Epoch: resp.Epoch,
				Ranges: []message.AckRange{{First: resp.Messages[0].PullSeq, Last: resp.Messages[ack-1].PullSeq}}}
			if _, err := gc.Call(ctx, transport.TypeAck, r.Encode()); err != nil {
				t.Fatal(err)
			}
		}
	}
	pull("c", 2, 1) // holds one
	pull("d", 1, 1) // holds none

	groups := func(req transport.ConsumerGroupsRequest) []transport.ConsumerGroupInfo {
		t.Helper()
		b, _ := json.Marshal(req)
		body, err := gc.Call(ctx, transport.TypeConsumerGroups, b)
		if err != nil {
			t.Fatal(err)
		}
		var infos []transport.ConsumerGroupInfo
		if err := json.Unmarshal(body, &infos); err != nil {
			t.Fatal(err)
		}
		return infos
	}
	one := groups(transport.ConsumerGroupsRequest{Subject: "s", ConsumerGroup: "a"})
	if len(one) != 1 || one[0].Unacked != 1 || len(one[0].Members) != 2 {
		t.Fatalf("group a: %+v", one)
	}
	c, d := one[0].Members[0], one[0].Members[1]
	if c.Name != "c" || c.InFlight != 1 || c.SeenMillis < 0 || c.SeenMillis > 20_000 ||
		d.Name != "d" || d.InFlight != 0 || d.SeenMillis < 0 || d.SeenMillis > 20_000 {
		t.Errorf("members %+v, want c holding one in flight, d none, both seen", one[0].Members)
	}
	if all := groups(transport.ConsumerGroupsRequest{Subject: "s"}); len(all) != 1 || all[0].Members != nil || all[0].Lag != one[0].Lag {
		t.Errorf("a listing: %+v, want group a without members", all)
	}
	if none := groups(transport.ConsumerGroupsRequest{Subject: "s", ConsumerGroup: "nobody"}); len(none) != 0 {
		t.Errorf("an unknown group: %+v", none)
	}
}
