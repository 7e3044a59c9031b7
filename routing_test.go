package qmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/netproxy"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/transport"
)

// startTwoGroups starts a metaserver and two one-node broker groups, g1
// and g2 (configured by tweaks, if any), registered with it and led, and
// an admin.Client of the cluster (closed when the test ends).
func startTwoGroups(t *testing.T, tweaks ...func(*server.Config)) (*server.MetaNode, map[string]*server.Node, *admin.Client) {
	t.Helper()
	m := testcluster.Meta(t, nil)
	groups := map[string]*server.Node{}
	for _, g := range []string{"g1", "g2"} {
		groups[g] = testcluster.Broker(t, func(c *server.Config) {
			testcluster.Registered(g, m.ClientAddr())(c)
			for _, tweak := range tweaks {
				tweak(c)
			}
		})
	}
	adm, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poll.Until(t, 30*time.Second, "both broker groups registered with leaders", func() bool {
		c, err := adm.Cluster(ctx)
		return err == nil && len(c.BrokerGroups) == 2 && c.BrokerGroups[0].Leader != "" && c.BrokerGroups[1].Leader != ""
	})
	return m, groups, adm
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

// proxiedBroker starts a one-node broker group, tweaked first by tweak
// (nil for none), whose clients reach it through a proxy: the address it
// advertises. It returns the node, the proxy and the node's own client
// address, past the proxy.
func proxiedBroker(t *testing.T, tweak func(*server.Config)) (*server.Node, *netproxy.Proxy, string) {
	t.Helper()
	own := testcluster.Addr(t)
	proxy, err := netproxy.New("127.0.0.1:0", own)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	n := testcluster.Broker(t, func(c *server.Config) {
		if tweak != nil {
			tweak(c)
		}
		c.ClientAddr, c.AdvertiseAddr = own, proxy.Addr()
	})
	return n, proxy, own
}

// idWonBy returns the first id PREFIX-N that rendezvous hashing gives to
// group among groups.
func idWonBy(prefix, group string, groups ...string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); qmq.PickFor(id, groups...) == group {
			return id
		}
	}
}

// refuses reports whether the broker at conn refuses a send as drained,
// probing with a new id each time (a drained group answers a duplicate of
// a message it stored, and the first probes may be stored).
func refuses(ctx context.Context, conn *transport.Conn) bool {
	probe := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprint("probe-", probes.Add(1)), Subject: "probe"}}}
	_, err := conn.Call(ctx, transport.TypeSend, probe.Encode())
	return transport.CodeOf(err) == transport.ReadOnly
}

var probes atomic.Int64

// TestSubjectSpansGroupsAndDrains checks routing end to end: a subject's
// sends are spread over its two broker groups, a consumer connected to a
// broker of one group gets them all exactly once, a drained group takes no
// more sends, and its consumers empty it.
func TestSubjectSpansGroupsAndDrains(t *testing.T) {
	m, groups, adm := startTwoGroups(t)
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
	if err := adm.SetWritable(ctx, "g2", false); err != nil {
		t.Fatal(err)
	}
	conn, err := transport.Dial(ctx, groups["g2"].ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poll.Until(t, 30*time.Second, "g2 to become readonly", func() bool { return refuses(ctx, conn) })
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

// TestChosenIDStoredOnceWhenItsReplyIsLost: a message whose id its
// producer chose, stored by a first attempt whose reply was lost, is not
// stored again in another broker group when its own is drained before the
// retry: the drained group's leader answers the retry as a duplicate. (It
// moved to the other group before, and the caller saw success.)
func TestChosenIDStoredOnceWhenItsReplyIsLost(t *testing.T) {
	m := testcluster.Meta(t, nil)
	g1, proxy, g1Addr := proxiedBroker(t, testcluster.Registered("g1", m.ClientAddr())) // clients reach g1 through the proxy
	g2 := testcluster.Broker(t, testcluster.Registered("g2", m.ClientAddr()))
	adm, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	poll.Until(t, 30*time.Second, "both broker groups registered with leaders", func() bool {
		c, err := adm.Cluster(ctx)
		return err == nil && len(c.BrokerGroups) == 2 && c.BrokerGroups[0].Leader != "" && c.BrokerGroups[1].Leader != ""
	})
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "orders", 20) // the route of orders names both groups
	id := idWonBy("order", "g1", "g1", "g2")
	holds := func(n *server.Node) bool {
		held, err := n.FSM().Holds([]string{id}, time.Now().UnixMilli())
		return err == nil && held[0]
	}

	proxy.Drop(func(string) bool { return true }, false) // g1's replies vanish
	sent := make(chan error, 1)
	go func() {
		msg := p.GenerateMessage("orders")
		msg.SetID(id)
		sent <- p.SendMessage(ctx, msg)
	}()
	poll.Until(t, 30*time.Second, "g1 to store the message", func() bool { return holds(g1) })
	if err := adm.SetWritable(ctx, "g1", false); err != nil {
		t.Fatal(err)
	}
	conn, err := transport.Dial(ctx, g1Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poll.Until(t, 30*time.Second, "g1 to refuse sends", func() bool { return refuses(ctx, conn) })
	// The producer's route says g1 is drained by now; let its retries through.
	proxy.Drop(nil, false)
	proxy.Refuse(func(string) bool { return true }) // cut the connections whose replies were lost
	proxy.Refuse(nil)
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	if holds(g2) {
		t.Fatal("the message is stored in g2 too: one send stored it in two broker groups")
	}
}

// TestChosenIDStaysWithAGroupThatMayHoldIt: a message whose id its
// producer chose, sent to a broker group that stored it and died before
// answering, is not sent to another group when the metaserver marks its
// own unavailable: the send fails, saying where it may be stored. (It
// moved, and was stored in both.)
func TestChosenIDStaysWithAGroupThatMayHoldIt(t *testing.T) {
	m := testcluster.Meta(t, func(c *server.MetaConfig) { c.GroupTimeout = time.Second })
	g1, proxy, _ := proxiedBroker(t, testcluster.Registered("g1", m.ClientAddr()))
	g2 := testcluster.Broker(t, testcluster.Registered("g2", m.ClientAddr()))
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "orders", 20)
	id := idWonBy("order", "g1", "g1", "g2")
	proxy.Drop(func(string) bool { return true }, false)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		msg := p.GenerateMessage("orders")
		msg.SetID(id)
		sent <- p.SendMessage(ctx, msg)
	}()
	poll.Until(t, 10*time.Second, "g1 to store the message", func() bool {
		held, err := g1.FSM().Holds([]string{id}, time.Now().UnixMilli())
		return err == nil && held[0]
	})
	g1.Close() // it dies before answering; the metaserver marks it unavailable within a second
	err = <-sent
	if err == nil || !strings.Contains(err.Error(), "broker group g1 may have stored it") {
		t.Fatalf("send: %v; want a failure saying g1 may hold it", err)
	}
	if held, err := g2.FSM().Holds([]string{id}, time.Now().UnixMilli()); err != nil || held[0] {
		t.Fatalf("the message is stored in g2 too (%v)", err)
	}
}

// storeThenDrain stores a message of orders whose id, PREFIX-N, its
// producer chose and g1 wins over g2, drains g1, and returns the id once
// g1 refuses sends.
func storeThenDrain(t *testing.T, ctx context.Context, m *server.MetaNode, groups map[string]*server.Node, adm *admin.Client, prefix string) string {
	t.Helper()
	first, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	sendAll(t, first, "orders", 20) // the route of orders names both groups
	id := idWonBy(prefix, "g1", "g1", "g2")
	msg := first.GenerateMessage("orders")
	msg.SetID(id)
	if err := first.SendMessage(ctx, msg); err != nil || msg.Duplicate() {
		t.Fatalf("first send: %v (duplicate %v)", err, msg.Duplicate())
	}
	if err := adm.SetWritable(ctx, "g1", false); err != nil {
		t.Fatal(err)
	}
	conn, err := transport.Dial(ctx, groups["g1"].ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	poll.Until(t, 30*time.Second, "g1 to refuse sends", func() bool { return refuses(ctx, conn) })
	return id
}

// TestChosenIDResentAfterItsGroupIsDrained: a resend from another
// producer of a message whose id it chose, after the broker group that
// stored it was drained, is answered as a duplicate by that group instead
// of being stored in another. (It went to the other group.)
func TestChosenIDResentAfterItsGroupIsDrained(t *testing.T) {
	m, groups, adm := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := storeThenDrain(t, ctx, m, groups, adm, "order")
	second, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	again := second.GenerateMessage("orders")
	again.SetID(id)
	if err := second.SendMessage(ctx, again); err != nil || !again.Duplicate() {
		t.Fatalf("resend after g1 was drained: %v (duplicate %v)", err, again.Duplicate())
	}
	if held, err := groups["g2"].FSM().Holds([]string{id}, time.Now().UnixMilli()); err != nil || held[0] {
		t.Fatalf("the resend is stored in g2 (%v)", err)
	}
	// A new id that g1 wins goes to g2 now, after g1 refused it.
	fresh := idWonBy("fresh", "g1", "g1", "g2")
	m2 := second.GenerateMessage("orders")
	m2.SetID(fresh)
	if err := second.SendMessage(ctx, m2); err != nil || m2.Duplicate() {
		t.Fatalf("a new id g1 wins, g1 drained: %v (duplicate %v)", err, m2.Duplicate())
	}
	if held, err := groups["g2"].FSM().Holds([]string{fresh}, time.Now().UnixMilli()); err != nil || !held[0] {
		t.Fatalf("the new id is not in g2 (%v)", err)
	}
}

// TestChosenIDResentPastItsWindowIsStoredAgain: a drained broker group
// that stored a message of a chosen id longer than its dedup window ago
// refuses a resend of the id, which is then stored in the other group. A
// drained group applies little, and it looked up the id by its state's
// time, which had stopped when it was drained: it answered the resend as
// a duplicate, and the message was stored nowhere.
func TestChosenIDResentPastItsWindowIsStoredAgain(t *testing.T) {
	const window = 2 * time.Second
	m, groups, adm := startTwoGroups(t, func(c *server.Config) { c.FSM.DedupWindow = window })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := storeThenDrain(t, ctx, m, groups, adm, "report")
	poll.Until(t, 30*time.Second, "the id's window to pass in g1", func() bool {
		held, err := groups["g1"].FSM().Holds([]string{id}, time.Now().UnixMilli())
		return err == nil && !held[0]
	})
	second, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	again := second.GenerateMessage("orders")
	again.SetID(id)
	if err := second.SendMessage(ctx, again); err != nil || again.Duplicate() {
		t.Fatalf("resend past the window, g1 drained: %v (duplicate %v), want stored in g2", err, again.Duplicate())
	}
	if held, err := groups["g2"].FSM().Holds([]string{id}, time.Now().UnixMilli()); err != nil || !held[0] {
		t.Fatalf("the resend is not in g2 (%v)", err)
	}
}

// warmProducer starts a broker behind a proxy (proxiedBroker) and a
// producer of it that has sent once (it holds the route and a connection);
// the producer is closed when the test ends.
func warmProducer(t *testing.T) (*server.Node, *netproxy.Proxy, *qmq.Producer) {
	t.Helper()
	n, proxy, _ := proxiedBroker(t, nil)
	p, err := qmq.NewProducer(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SendMessage(ctx, p.GenerateMessage("orders")); err != nil {
		t.Fatal(err)
	}
	return n, proxy, p
}

// TestCancelledSendIsNotRetried: a send whose caller's context is
// cancelled while its request is unanswered is not retried: its caller
// was told it failed. (The producer went on trying until its send
// timeout and stored it once the broker could be reached.)
func TestCancelledSendIsNotRetried(t *testing.T) {
	n, proxy, p := warmProducer(t)
	proxy.Drop(func(string) bool { return true }, true) // requests vanish
	sctx, scancel := context.WithCancel(context.Background())
	m := p.GenerateMessage("orders")
	sent := make(chan error, 1)
	go func() { sent <- p.SendMessage(sctx, m) }()
	poll.Until(t, 10*time.Second, "the request to vanish", func() bool { return proxy.Dropped() > 0 })
	scancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled send: %v", err)
	}
	proxy.Drop(nil, true)
	proxy.Refuse(func(string) bool { return true }) // cut the connection: a retry would reconnect
	proxy.Refuse(nil)
	if err := p.Close(); err != nil { // waits for every send under way
		t.Fatal(err)
	}
	if held, err := n.FSM().Holds([]string{m.ID()}, time.Now().UnixMilli()); err != nil || held[0] {
		t.Fatalf("the cancelled message was stored after its caller was told it failed (%v)", err)
	}
}

// TestSendAbandonedBeforeItsRequestIsNotSent: a send whose caller gave up
// (its SendMessage returned, saying it was not sent) while the producer
// was getting its request ready is left out of the request. (It was
// sent, and stored, after its caller had been told it failed.)
func TestSendAbandonedBeforeItsRequestIsNotSent(t *testing.T) {
	n, _, p := warmProducer(t)
	var armed atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	qmq.BeforeRequest(p, func(string) {
		if armed.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
	})
	armed.Store(true)
	sctx, scancel := context.WithCancel(context.Background())
	m := p.GenerateMessage("orders")
	sent := make(chan error, 1)
	go func() { sent <- p.SendMessage(sctx, m) }()
	<-entered
	scancel()
	err := <-sent
	close(release)
	if !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "may have stored") {
		t.Fatalf("a send given up before its request: %v", err)
	}
	if err := p.Close(); err != nil { // waits for every send under way
		t.Fatal(err)
	}
	if held, err := n.FSM().Holds([]string{m.ID()}, time.Now().UnixMilli()); err != nil || held[0] {
		t.Fatalf("the message was stored after its caller was told it was not sent (%v)", err)
	}
}

// TestNewGroupGetsWhatIsSentAfterSubscribe: a consumer group starting at
// the latest message gets every message sent once Subscribe has
// returned. Subscribe used to return before the group existed, and 18 or
// 19 of 20 messages sent at once arrived.
func TestNewGroupGetsWhatIsSentAfterSubscribe(t *testing.T) {
	n := testcluster.Broker(t, nil)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for try := range 5 {
		subject := fmt.Sprint("fresh-", try)
		c := newCollector(20)
		sub, err := qmq.Subscribe(n.ClientAddr(), subject, "billing", c.handle, qmq.WithPullWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			if err := p.SendMessage(ctx, p.GenerateMessage(subject)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			c.mu.Lock()
			t.Fatalf("try %d: %d of the 20 messages sent after Subscribe returned arrived", try, len(c.got))
		}
		sub.Close()
	}
}

// TestGroupGetsWhatARouteAddedGroupHeld: a broker group added to a
// subject's route is read from its first message of the subject by a
// consumer group that existed before: what it stored before the group's
// first pull there is not skipped. (Of 20 messages all stored in the
// added group, none arrived.)
func TestGroupGetsWhatARouteAddedGroupHeld(t *testing.T) {
	m, groups, adm := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := adm.Assign(ctx, "orders", []string{"g1"}, 0); err != nil {
		t.Fatal(err)
	}
	c := newCollector(20)
	sub, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", c.handle, qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := adm.Assign(ctx, "orders", []string{"g2"}, 0); err != nil {
		t.Fatal(err)
	}
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := sendAll(t, p, "orders", 20)
	if held, _ := drained(groups["g2"], "orders"); held == 0 {
		t.Fatal("g2 took none of the messages")
	}
	qmq.SetSubscriptionRouteTTL(sub, 0) // the subscription sees g2 now
	select {
	case <-c.done:
	case <-ctx.Done():
		c.mu.Lock()
		t.Fatalf("%d of %d arrived", len(c.got), len(sent))
	}
}

// TestRestartedConsumerGetsWhatARouteAddedGroupHeld: the same when no
// consumer of the group ran while the broker group was added and took
// messages: a broker group of the route holds the group, so it starts at
// the earliest message in one where it does not exist yet. The admin's
// Assign sets the group up there; the metaserver's own assignment sets up
// nothing, and the consumer's registration finds it missing.
func TestRestartedConsumerGetsWhatARouteAddedGroupHeld(t *testing.T) {
	for name, assign := range map[string]func(ctx context.Context, t *testing.T, meta string, adm *admin.Client, group string){
		"admin.Client.Assign": func(ctx context.Context, t *testing.T, _ string, adm *admin.Client, group string) {
			if _, err := adm.Assign(ctx, "orders", []string{group}, 0); err != nil {
				t.Fatal(err)
			}
		},
		"the metaserver's assign": func(ctx context.Context, t *testing.T, meta string, _ *admin.Client, group string) {
			assignRaw(t, ctx, meta, "orders", group)
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, _, adm := startTwoGroups(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			assign(ctx, t, m.ClientAddr(), adm, "g1")
			first, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", func(context.Context, *qmq.Message) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			first.Close()
			assign(ctx, t, m.ClientAddr(), adm, "g2")
			p, err := qmq.NewProducer(m.ClientAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			sent := sendAll(t, p, "orders", 20) // about half in g2
			c := newCollector(len(sent))
			again, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", c.handle, qmq.WithPullWait(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			select {
			case <-c.done:
			case <-ctx.Done():
				c.mu.Lock()
				t.Fatalf("%d of %d arrived", len(c.got), len(sent))
			}
		})
	}
}

// assignRaw adds groups to subject's route with the metaserver's own
// request, as the metaserver's automatic assignment does: unlike
// admin.Client.Assign, it sets up no consumer group in them.
func assignRaw(t *testing.T, ctx context.Context, meta, subject string, groups ...string) {
	t.Helper()
	conn, err := transport.Dial(ctx, meta)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, err := json.Marshal(transport.AssignRequest{Subject: subject, BrokerGroups: groups})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Call(ctx, transport.TypeAssign, req); err != nil {
		t.Fatal(err)
	}
}

// TestRestartedConsumerGetsWhatARouteAddedGroupHeldWhileItsHolderIsDown:
// the same, with the one broker group that holds the group down while the
// consumer registers: a group that does not answer may hold it, and the
// metaserver's record of the group's name says it existed, so the group
// starts at the earliest message where it is missing.
func TestRestartedConsumerGetsWhatARouteAddedGroupHeldWhileItsHolderIsDown(t *testing.T) {
	m, groups, _ := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	assignRaw(t, ctx, m.ClientAddr(), "orders", "g1")
	first, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", func(context.Context, *qmq.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	assignRaw(t, ctx, m.ClientAddr(), "orders", "g2")
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sent := map[string]bool{}
	for i := range 10 {
		msg := p.GenerateMessage("orders")
		msg.SetID(idWonBy(fmt.Sprintf("in-g2-%d", i), "g2", "g1", "g2"))
		if err := p.SendMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
		sent[msg.ID()] = true
	}
	groups["g1"].Close()
	c := newCollector(len(sent))
	again, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", c.handle, qmq.WithPullWait(200*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	select {
	case <-c.done:
	case <-ctx.Done():
		c.mu.Lock()
		t.Fatalf("%d of the %d messages g2 stored arrived", len(c.got), len(sent))
	}
}

// TestNewGroupNamedBeforeStartsAtTheLatest: a consumer group no broker
// group holds starts at the latest message, even when the metaserver
// recorded its name before (a consumer of it looked up the route, and
// never registered). It used to take that record for a group that
// existed, and started at the earliest message.
func TestNewGroupNamedBeforeStartsAtTheLatest(t *testing.T) {
	m, _, _ := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "orders", 20) // before the group exists
	conn, err := transport.Dial(ctx, m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, err := json.Marshal(transport.RouteRequest{Subject: "orders", ConsumerGroup: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Call(ctx, transport.TypeRoute, req); err != nil {
		t.Fatal(err)
	}
	pl, err := qmq.NewPuller(m.ClientAddr(), "orders", "fresh")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	after := sendAll(t, p, "orders", 5)
	got := map[string]bool{}
	for len(got) < len(after) {
		msgs, err := pl.Pull(ctx, 100, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range msgs {
			if !after[msg.ID()] {
				t.Fatalf("a new group at the latest message got %s, sent before it existed", msg.ID())
			}
			got[msg.ID()] = true
		}
	}
	if msgs, err := pl.Pull(ctx, 100, 300*time.Millisecond); err != nil || len(msgs) > 0 {
		t.Fatalf("after the %d sent since: %d more (%v)", len(after), len(msgs), err)
	}
}

// TestPullInTurnWaitsNotOnAnEmptyGroup: a Puller asked for fewer messages
// than the subject has broker groups pulls from them in turn, and a turn
// long-polls a group only when no other may have messages: with every
// message in g1, no pull waits out its wait on g2. (A worker of its own
// whose handler was slow pulled one message at a time, and every other
// pull waited the whole pull wait on the empty group: 10 messages of
// 300 ms took 53 s.)
func TestPullInTurnWaitsNotOnAnEmptyGroup(t *testing.T) {
	m, _, _ := startTwoGroups(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendAll(t, p, "orders", 20) // the route of orders names both groups
	pl, err := qmq.NewPuller(m.ClientAddr(), "orders", "one-at-a-time")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	for i := range 10 {
		msg := p.GenerateMessage("orders")
		msg.SetID(idWonBy(fmt.Sprintf("in-g1-%d", i), "g1", "g1", "g2"))
		if err := p.SendMessage(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	const wait = 25 * time.Second
	for got := 0; got < 10; {
		pctx, pcancel := context.WithTimeout(ctx, wait/2)
		msgs, err := pl.Pull(pctx, 1, wait)
		pcancel()
		if err != nil {
			t.Fatalf("after %d of 10: a pull of one waited on g2, empty, while g1 held messages: %v", got, err)
		}
		got += len(msgs)
	}
	// With nothing anywhere, a pull still waits its wait before it says
	// nothing came (its first turns do not wait, the last ones do).
	// The wire carries a wait in whole milliseconds, so each turn may
	// wait up to a millisecond less than the time left: a few in all.
	const short, truncated = 2 * time.Second, 5 * time.Millisecond
	start := time.Now()
	if msgs, err := pl.Pull(ctx, 1, short); err != nil || len(msgs) > 0 || time.Since(start) < short-truncated {
		t.Fatalf("a pull of one with nothing to pull: %d messages, %v, after %s of its %s wait", len(msgs), err, time.Since(start), short)
	}
}

// TestHangingAcksHoldBackNoOtherGroup: while one broker group's acks hang,
// another's are sent at once, before their messages' ack wait passes.
// (Every flush waited for all the broker groups' acks, up to 30 s.)
func TestHangingAcksHoldBackNoOtherGroup(t *testing.T) {
	m := testcluster.Meta(t, nil)
	g1 := testcluster.Broker(t, testcluster.Registered("g1", m.ClientAddr()))
	g2, proxy, _ := proxiedBroker(t, testcluster.Registered("g2", m.ClientAddr()))
	adm, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	poll.Until(t, 30*time.Second, "both broker groups available", func() bool {
		c, err := adm.Cluster(ctx)
		return err == nil && len(c.BrokerGroups) == 2 && c.BrokerGroups[0].Available && c.BrokerGroups[1].Available
	})
	if _, err := adm.Assign(ctx, "orders", []string{"g1", "g2"}, 0); err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 2)
	sub, err := qmq.Subscribe(m.ClientAddr(), "orders", "billing", func(_ context.Context, msg *qmq.Message) error {
		if msg.ID() == "via-g2" {
			proxy.SetLatency(20 * time.Second) // its ack, and everything else to g2, hangs from now on
		}
		handled <- msg.ID()
		return nil
	}, qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	sendTo := func(n *server.Node, id string) {
		conn, err := transport.Dial(ctx, n.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req := &transport.SendRequest{Messages: []*message.Message{{ID: id, Subject: "orders", CreatedAt: 1, Body: []byte("x")}}}
		if _, err := conn.Call(ctx, transport.TypeSend, req.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	sendTo(g2, "via-g2")
	if id := <-handled; id != "via-g2" {
		t.Fatalf("handled %s", id)
	}
	sendTo(g1, "via-g1")
	if id := <-handled; id != "via-g1" {
		t.Fatalf("handled %s", id)
	}
	poll.Until(t, 5*time.Second, "g1's ack to land while g2's hangs", func() bool {
		_, unacked := drained(g1, "orders")
		return unacked == 0
	})
	proxy.SetLatency(0) // let g2's ack land, so the subscription stops at once
	proxy.Refuse(func(string) bool { return true })
	proxy.Refuse(nil)
	poll.Until(t, 10*time.Second, "g2's ack to land once g2 answers", func() bool {
		_, unacked := drained(g2, "orders")
		return unacked == 0
	})
}
