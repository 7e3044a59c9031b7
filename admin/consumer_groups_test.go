package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// twoBrokerGroups starts a metaserver and two one-node broker groups, g1
// and g2, registered with it and led, and returns a Client of the cluster
// (closed when the test ends).
func twoBrokerGroups(t *testing.T) *admin.Client {
	t.Helper()
	m := testcluster.Meta(t, nil)
	for _, g := range []string{"g1", "g2"} {
		testcluster.Broker(t, testcluster.Registered(g, m.ClientAddr()))
	}
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poll.Until(t, 30*time.Second, "both broker groups registered with leaders", func() bool {
		c, err := a.Cluster(ctx)
		return err == nil && len(c.BrokerGroups) == 2 && c.BrokerGroups[0].Leader != "" && c.BrokerGroups[1].Leader != ""
	})
	return a
}

// TestAssignCarriesGroupSettings: a broker group added to a subject's
// route gets the settings an operator gave its consumer groups in the
// earlier ones. (It gave them the defaults.)
func TestAssignCarriesGroupSettings(t *testing.T) {
	a := twoBrokerGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := a.Assign(ctx, "orders", []string{"g1"}, 0); err != nil {
		t.Fatal(err)
	}
	ackWait, deliveries := 7*time.Second, uint32(3)
	if _, err := a.SetConsumerGroup(ctx, "orders", "billing", admin.ConsumerGroupChanges{AckWait: &ackWait, MaxDeliveries: &deliveries}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Assign(ctx, "orders", []string{"g2"}, 0); err != nil {
		t.Fatal(err)
	}
	v, err := a.ConsumerGroup(ctx, "orders", "billing")
	if err != nil || len(v.BrokerGroups) != 2 || v.SettingsDiffer {
		t.Fatalf("after g2 joined: %+v, %v; want billing in both broker groups, with the same settings", v, err)
	}
	for _, g := range v.BrokerGroups {
		if g.Settings.AckWait != ackWait || g.Settings.MaxDeliveries != deliveries || g.Cursor != 0 {
			t.Errorf("broker group %s: %+v at cursor %d, want ack wait 7s, 3 deliveries, at the start", g.BrokerGroup, g.Settings, g.Cursor)
		}
	}
}

// Forgetting a consumer group frees its state on the broker; the group
// consuming again starts afresh at the oldest retained message.
func TestForgetConsumerGroup(t *testing.T) {
	n := testcluster.Broker(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		if err := p.SendMessage(ctx, p.GenerateMessage("jobs")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "gone", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Pull(ctx, 10, time.Second)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("pull: %d, %v", len(msgs), err)
	}
	if err := c.Ack(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	c.Close()
	a, err := admin.New(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.ForgetConsumerGroup(ctx, "jobs", "gone")
	if err != nil || len(res) != 1 || !res[0].Known || res[0].Consumers != 1 || res[0].Unacked != 1 {
		t.Fatalf("forget: %+v, %v", res, err)
	}
	if b := n.FSM().Backlog(); b != 0 {
		t.Fatalf("backlog %d once the only group is forgotten", b)
	}
	again, err := qmq.NewPuller(n.ClientAddr(), "jobs", "gone", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if msgs, err := again.Pull(ctx, 10, time.Second); err != nil || len(msgs) != 2 {
		t.Fatalf("the forgotten group consuming again: %d messages, %v; want both from the start", len(msgs), err)
	}
}
