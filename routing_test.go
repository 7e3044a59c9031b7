package qmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/await"
	"github.com/qmqgo/qmq/internal/testcluster"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/transport"
)

// startTwoGroups starts a metaserver and two one-node broker groups, g1
// and g2, registered with it and led, and an Admin of the cluster (closed
// when the test ends).
func startTwoGroups(t *testing.T) (*server.MetaNode, map[string]*server.Node, *qmq.Admin) {
	t.Helper()
	m := testcluster.Meta(t, nil)
	groups := map[string]*server.Node{}
	for _, g := range []string{"g1", "g2"} {
		groups[g] = testcluster.Broker(t, testcluster.Registered(g, m.ClientAddr()))
	}
	admin, err := qmq.NewAdmin(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	await.True(t, 30*time.Second, "both broker groups registered with leaders", func() bool {
		c, err := admin.Cluster(ctx)
		return err == nil && len(c.Groups) == 2 && c.Groups[0].Leader != "" && c.Groups[1].Leader != ""
	})
	return m, groups, admin
}

// drained reports how far a broker group's consume log of subject reaches
// (in bytes: it grows with every message) and how many of its consumers
// hold unacknowledged messages.
func drained(n *server.Node, subject string) (held int64, unacked int) {
	return n.FSM().Ends().Consume[subject], len(n.FSM().ConsumersWithUnacked())
}

// collector gathers what a subscription receives, by id.
type collector struct {
	mu   sync.Mutex
	got  map[string]int
	want int
	done chan struct{}
}

func newCollector(want int) *collector {
	return &collector{got: map[string]int{}, want: want, done: make(chan struct{})}
}

func (c *collector) handle(_ context.Context, m *qmq.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[m.ID()]++
	if len(c.got) == c.want {
		close(c.done)
	}
	return nil
}

// sendAll sends n messages in rounds of 50 concurrent ones: each round is
// at least one request, and a producer spreads requests over the groups.
func sendAll(t *testing.T, p *qmq.Producer, subject string, n int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	var wg sync.WaitGroup
	for i := range n {
		if i%50 == 0 {
			wg.Wait()
		}
		m := p.GenerateMessage(subject)
		ids[m.ID()] = true
		wg.Add(1)
		p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("send: %v", err)
			}
		}))
	}
	wg.Wait()
	return ids
}

// TestSubjectSpansGroupsAndDrains checks routing end to end: a subject's
// sends are spread over its two broker groups, a consumer connected to a
// broker of one group gets them all exactly once, a drained group takes no
// more sends, and its consumers empty it.
func TestSubjectSpansGroupsAndDrains(t *testing.T) {
	m, groups, admin := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := sendAll(t, p, "orders", 400)
	for name, n := range groups {
		if held, _ := drained(n, "orders"); held == 0 {
			t.Fatalf("group %s got none of the subject's messages", name)
		}
	}

	// Drain g2; wait until its leader refuses sends, then send more.
	if err := admin.SetWritable(ctx, "g2", false); err != nil {
		t.Fatal(err)
	}
	conn, err := transport.Dial(ctx, groups["g2"].ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	probe := (&transport.SendRequest{Messages: []*logs.Message{{ID: "probe", Subject: "probe"}}}).Encode()
	await.True(t, 30*time.Second, "g2 to become readonly", func() bool {
		_, err := conn.Call(ctx, transport.TypeSend, probe)
		return transport.CodeOf(err) == transport.ReadOnly
	})
	heldBefore, _ := drained(groups["g2"], "orders")
	for id := range sendAll(t, p, "orders", 200) {
		sent[id] = true
	}
	if held, _ := drained(groups["g2"], "orders"); held != heldBefore {
		t.Fatalf("the drained group took %d more messages", held-heldBefore)
	}

	// One consumer, connected to a g1 broker, gets everything from both.
	c := newCollector(len(sent))
	sub, err := qmq.Subscribe(groups["g1"].ClientAddr(), "orders", "billing", c.handle, qmq.StartAt(qmq.Earliest), qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		t.Fatalf("received %d of %d", len(c.got), len(sent))
	}
	sub.Close()
	c.mu.Lock()
	for id, n := range c.got {
		if !sent[id] || n != 1 {
			t.Errorf("message %s: sent %v, received %d times", id, sent[id], n)
		}
	}
	c.mu.Unlock()
	// The drained group ends empty: everything it holds was acknowledged.
	if _, unacked := drained(groups["g2"], "orders"); unacked != 0 {
		t.Fatalf("drained group still has %d consumers with unacked messages", unacked)
	}
}

// TestProducerMovesOffADeadGroup: when one of a subject's groups dies
// whole, sends wait on it only until the metaserver marks it unavailable,
// then go to the subject's other group; none fails.
func TestProducerMovesOffADeadGroup(t *testing.T) {
	m := testcluster.Meta(t, func(c *server.MetaConfig) { c.GroupTimeout = time.Second })
	groups := map[string]*server.Node{}
	for _, g := range []string{"g1", "g2"} {
		groups[g] = testcluster.Broker(t, testcluster.Registered(g, m.ClientAddr()))
	}
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "orders", 100) // routes orders to both groups
	held, _ := drained(groups["g1"], "orders")
	groups["g2"].Close()
	start := time.Now()
	sendAll(t, p, "orders", 200) // fails the test if any send fails
	t.Logf("200 sends took %s with one of the two groups dead", time.Since(start).Round(time.Millisecond))
	if after, _ := drained(groups["g1"], "orders"); after <= held {
		t.Fatal("the live group took none of the sends")
	}
}

// TestPullerWithoutWait: a pull that waits for nothing still returns what
// is ready, and a Puller acks only what it pulled itself.
func TestPullerWithoutWait(t *testing.T) {
	n := testcluster.Broker(t, nil)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "jobs", 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	msgs, err := a.Pull(ctx, 10, 0)
	if err != nil || len(msgs) != 5 {
		t.Fatalf("pull without waiting: %d messages (%v), want the 5 ready", len(msgs), err)
	}
	other, err := qmq.NewPuller(n.ClientAddr(), "jobs", "auditors")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Ack(ctx, msgs[0]); err == nil {
		t.Fatal("a Puller acked a message another Puller pulled")
	}
	if err := a.Ack(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestSendsGoOnWhileTheMetaserverIsDown: a route past its time to live is
// asked for again only briefly; while the metaserver does not answer, sends
// go on to the broker group the cached route names.
func TestSendsGoOnWhileTheMetaserverIsDown(t *testing.T) {
	m := testcluster.Meta(t, nil)
	testcluster.Broker(t, func(c *server.Config) { c.Meta = []string{m.ClientAddr()} })
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SendMessage(ctx, p.GenerateMessage("orders")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	qmq.SetRouteTTL(p, 0) // every route is stale from now on
	for range 3 {
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.SendMessage(sctx, p.GenerateMessage("orders"))
		scancel()
		if err != nil {
			t.Fatalf("send with the metaserver down: %v", err)
		}
		// A stale route is asked for again for at most 2 s.
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("send took %s with the metaserver down: the stale route was not kept", d)
		}
	}
}
