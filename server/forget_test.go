package server

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/transport"
)

// Forgetting a consumer group clears it from every broker group of the
// subject and from the metaserver's route, so it no longer counts against
// either's limits.
func TestForgetConsumerGroupEverywhere(t *testing.T) {
	m := startMeta(t, "m1", true)
	b := startMetaBroker(t, "g1", m)
	ctx := ctxFor(t, 30*time.Second)
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "g1 available", func() bool { ok, _ := groupAvailable(t, a, "g1"); return ok })

	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendMessage(ctx, p.GenerateMessage("jobs")); err != nil {
		t.Fatal(err)
	}
	c, err := qmq.NewPuller(m.ClientAddr(), "jobs", "old", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := c.Pull(ctx, 10, time.Second); err != nil || len(msgs) != 1 {
		t.Fatalf("pull: %d, %v", len(msgs), err)
	}
	c.Close()
	if r, err := a.Route(ctx, "jobs"); err != nil || !slices.Contains(r.ConsumerGroups, "old") {
		t.Fatalf("route before: %+v, %v", r, err)
	}
	res, err := a.ForgetConsumerGroup(ctx, "jobs", "old")
	if err != nil || len(res) != 1 || !res[0].Known || res[0].Unacked != 1 {
		t.Fatalf("forget: %+v, %v", res, err)
	}
	if r, err := a.Route(ctx, "jobs"); err != nil || slices.Contains(r.ConsumerGroups, "old") {
		t.Fatalf("route after: %+v, %v", r, err)
	}
	if bl := b.FSM().Backlog(); bl != 0 {
		t.Fatalf("backlog %d after the only group was forgotten", bl)
	}
	// A bad name is refused by the broker before it proposes anything.
	gc := clientOf(t, b.ClientAddr())
	bad, _ := json.Marshal(transport.ForgetConsumerGroupRequest{Subject: "jobs", ConsumerGroup: "no/slash"})
	if _, err := gc.Call(context.Background(), transport.TypeForgetConsumerGroup, bad); transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("a bad group name: %v, want INVALID", err)
	}
}
