package qmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/logs"
)

// sendAs sends a message of subject with a chosen id and body through p,
// and reports whether the broker answered it as a duplicate.
func sendAs(ctx context.Context, t *testing.T, p *qmq.Producer, subject, id, body string) bool {
	t.Helper()
	m := p.GenerateMessage(subject)
	if err := m.SetID(id); err != nil {
		t.Fatal(err)
	}
	m.SetBody([]byte(body))
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatalf("send of %s: %v", id, err)
	}
	return m.Duplicate()
}

// A message resent with the same chosen id by another Producer (another
// process resending after a crash) is stored once: the second send is
// answered as a duplicate, and consumers get the first.
func TestChosenIDIsStoredOnce(t *testing.T) {
	n, first, ctx := brokerAndProducer(t, nil)
	second, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if sendAs(ctx, t, first, "orders", "order-42", "first") {
		t.Fatal("the first send of order-42 was answered as a duplicate")
	}
	if !sendAs(ctx, t, second, "orders", "order-42", "second") {
		t.Fatal("the second send of order-42 was not answered as a duplicate")
	}
	if err := first.SendMessage(ctx, first.GenerateMessage("orders")); err != nil {
		t.Fatal(err)
	}
	c, err := qmq.NewPuller(n.ClientAddr(), "orders", "billing", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []*qmq.Message
	for len(got) < 2 && ctx.Err() == nil {
		msgs, err := c.Pull(ctx, 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	if more, err := c.Pull(ctx, 10, 0); err != nil || len(more) != 0 {
		t.Fatalf("a third message: %d more (%v)", len(more), err)
	}
	if len(got) != 2 || got[0].ID() != "order-42" || string(got[0].Body()) != "first" || got[1].ID() == "order-42" {
		t.Fatalf("consumed %v, want order-42 once (the first send's) and the other message", ids(got))
	}
}

// Over a subject in two broker groups, a chosen id goes to the same group
// from every Producer, so a resend from another Producer, whose turn over
// the groups differs, is still stored once.
func TestChosenIDIsStoredOnceAcrossGroups(t *testing.T) {
	m, groups, _ := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var producers [2]*qmq.Producer
	for i := range producers {
		p, err := qmq.NewProducer(m.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		producers[i] = p
	}
	// The second producer's turn over the groups is one ahead of the first's.
	if err := producers[1].SendMessage(ctx, producers[1].GenerateMessage("orders")); err != nil {
		t.Fatal(err)
	}
	const total = 20
	for i := range total {
		if sendAs(ctx, t, producers[0], "orders", fmt.Sprintf("order-%d", i), "first") {
			t.Fatalf("the first send of order-%d was answered as a duplicate", i)
		}
	}
	for i := range total {
		if !sendAs(ctx, t, producers[1], "orders", fmt.Sprintf("order-%d", i), "again") {
			t.Errorf("the resend of order-%d was stored again", i)
		}
	}
	stored := int64(0)
	for name, n := range groups {
		held := n.FSM().Ends().Consume["orders"] / logs.ConsumeRecordSize
		t.Logf("group %s holds %d messages of orders", name, held)
		stored += held
	}
	if stored != total+1 {
		t.Fatalf("%d messages stored, want %d: the %d chosen ids once each and one more", stored, total+1, total)
	}
}
