package server

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// sendRaw sends one message through c and returns its outcome.
func sendRaw(t *testing.T, c *transport.LeaderClient, m *message.Message) transport.SendStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body, err := c.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{m}}).Encode())
	if err != nil {
		t.Fatalf("send %s: %v", m.ID, err)
	}
	resp, err := transport.DecodeSendResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Results[0]; r.Status == transport.SendRejected {
		t.Fatalf("send %s rejected: %s", m.ID, r.Error)
	}
	return resp.Results[0].Status
}

// TestLeaderElectedWithItsClockAheadFiresNothingEarly: n2's clock runs an
// hour ahead from the start. Made the leader, it must not fire a delayed
// message before its time by the other nodes' (correct) clocks, nor let
// the dedup window pass: a send retried with the same id after the
// election is still a duplicate.
func TestLeaderElectedWithItsClockAheadFiresNothingEarly(t *testing.T) {
	ahead := func() time.Time { return time.Now().Add(time.Hour) }
	nodes := startGroup(t, func(id string, c *Config) {
		if id == "n2" {
			c.Now = ahead
		}
	})
	n1, n2 := nodes[0], nodes[1]
	addrs := clientAddrs(nodes)
	c, err := transport.NewLeaderClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	due := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	if got := sendRaw(t, c, &message.Message{ID: "wake-up", Subject: "timers", DeliverAt: due.UnixMilli()}); got != transport.SendScheduled {
		t.Fatalf("delayed send: status %d, want scheduled", got)
	}
	once := &message.Message{ID: "order-42", Subject: "orders"}
	if got := sendRaw(t, c, once); got != transport.SendAppended {
		t.Fatalf("first send: status %d, want appended", got)
	}

	if err := n1.raft.LeadershipTransferToServer(raft.ServerID("n2"), raft.ServerAddress(n2.cfg.RaftAddr)).Error(); err != nil {
		t.Fatalf("transfer leadership to n2: %v", err)
	}
	waitFor(t, 10*time.Second, "n2 to lead", n2.isLeader)
	elected := time.Now()
	if got := sendRaw(t, c, &message.Message{ID: "order-42", Subject: "orders"}); got != transport.SendDuplicate {
		t.Errorf("a send retried after the election: status %d, want duplicate (the dedup window passed early)", got)
	}
	t.Logf("first send after the election answered %s after n2 was seen leading", time.Since(elected).Round(time.Millisecond))
	if time.Now().After(due.Add(-time.Second)) {
		t.Fatal("the election took until the delayed message was nearly due: the test did not exercise it")
	}

	waitFor(t, 20*time.Second, "the delayed message to fire", func() bool {
		msgs := subjectMessages(t, n2, "timers")
		if len(msgs) > 0 && time.Now().Before(due) {
			t.Fatalf("the delayed message fired by %s, %s before its time", n2.cfg.ID, due.Sub(time.Now()).Round(time.Millisecond))
		}
		return len(msgs) > 0
	})
	if msgs := subjectMessages(t, n2, "orders"); len(msgs) != 1 {
		t.Errorf("orders holds %d messages, want the one sent twice stored once", len(msgs))
	}
}
