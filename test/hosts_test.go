package test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/netns"
)

// newHostNetwork returns a network of hosts for the test (test/netns). Where
// namespaces cannot be made (not root), it fails the test saying why,
// unless QMQ_HOSTS=off opts out of the tests across hosts: then it skips,
// saying so.
func newHostNetwork(t *testing.T, seed uint64) *netns.Network {
	t.Helper()
	if err := netns.Available(); err != nil {
		if os.Getenv("QMQ_HOSTS") == "off" {
			t.Skipf("QMQ_HOSTS=off: %v", err)
		}
		t.Fatalf("%v (run as root, or set QMQ_HOSTS=off to leave the tests across hosts out)", err)
	}
	return netns.New(t, seed)
}

// A broker group of three nodes, each on a host of its own with 1 ms each
// way between hosts and 0.5 % loss: it forms, every lone send takes at
// least the two round trips the network imposes (client to leader, leader
// to a follower), and after the leader is killed and restarted the group
// elects another, catches up, and its replicas hold the same logs.
func TestClusterOnHosts(t *testing.T) {
	net := newHostNetwork(t, 1)
	net.SetLinks(netns.Link{Delay: time.Millisecond, Loss: 0.005})
	c := NewCluster(t, "g1", "--election-timeout", "500ms")
	c.UseHosts(net)
	c.Form("", "a", "b", "c")
	for _, n := range c.Nodes() {
		if n.Host == nil || n.IP != n.Host.Addr.String() {
			t.Fatalf("node %s is not on a host of its own (ip %q)", n.ID, n.IP)
		}
	}
	p, err := qmq.NewProducer(c.ClientAddrs(), qmq.WithBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var took []time.Duration
	send := func(i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		m := p.GenerateMessage("orders")
		m.SetBody([]byte(fmt.Sprint(i)))
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		took = append(took, time.Since(start))
	}
	for i := range 50 {
		send(i)
	}
	slices.Sort(took)
	t.Logf("lone sends at 2 ms RTT: min %s, p50 %s", took[0], took[len(took)/2])
	// The first sends also dial; from the fifth on the connection is up.
	if took[0] < 4*time.Millisecond {
		t.Fatalf("a send was acknowledged in %s, under the two round trips of 2 ms the hosts impose", took[0])
	}
	l, term := (&Chaos{t: t}).leader(c)
	l.Kill()
	c.WaitFor(30*time.Second, "a leader after term "+fmt.Sprint(term), func() error {
		_, st, err := c.Leader()
		if err == nil && st.Term <= term {
			err = fmt.Errorf("term %d", st.Term)
		}
		return err
	})
	for i := 50; i < 60; i++ {
		send(i)
	}
	l.Restart()
	c.WaitFor(30*time.Second, "the group converges", func() error { _, err := c.Converged(); return err })
	c.SameReplicas(time.Minute)
	if st := net.Switch().Stats(); st.Lost == 0 || st.Forwarded == 0 {
		t.Fatalf("the switch forwarded %d packets and lost %d: the nodes' traffic did not cross it", st.Forwarded, st.Lost)
	}
}

// A consumer and a producer whose broker group's leader has its host cut
// off, and stays cut off, go on with the new leader within seconds of its
// election: the connections to the silent old leader fail within the
// SDK's silence bound (TCP keepalive, about 3 s) instead
// of holding each long poll and send for its whole timeout, and the
// shunned old leader is not tried again and again meanwhile.
func TestClientsLeaveACutOffLeader(t *testing.T) {
	net := newHostNetwork(t, 2)
	net.SetLinks(netns.Link{Delay: time.Millisecond})
	c := NewCluster(t, "g1", "--election-timeout", "500ms")
	c.UseHosts(net)
	c.Form("", "a", "b", "c")
	p, err := qmq.NewProducer(c.ClientAddrs(), qmq.WithSendTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got := make(chan string, 100)
	sub, err := qmq.Subscribe(c.ClientAddrs(), "orders", "billing", func(_ context.Context, m *qmq.Message) error {
		got <- string(m.Body())
		return nil
	}, qmq.StartAt(qmq.Earliest), qmq.WithPullWait(500*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// roundTrip sends body and waits for it to arrive, returning how long
	// the send took and how long until it arrived.
	roundTrip := func(body string, within time.Duration) (sent, arrived time.Duration) {
		t.Helper()
		start := time.Now()
		m := p.GenerateMessage("orders")
		m.SetBody([]byte(body))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("send %s: %v", body, err)
		}
		sent = time.Since(start)
		timeout := time.After(within)
		for {
			select {
			case b := <-got:
				if b == body {
					return sent, time.Since(start)
				}
			case <-timeout:
				t.Fatalf("%s not delivered within %s of its send", body, within)
			}
		}
	}
	roundTrip("before", 10*time.Second)
	l, term := (&Chaos{t: t}).leader(c)
	cutAt := time.Now()
	net.Cut(l.Host, true)
	defer net.Cut(l.Host, false)
	elected, _ := (&Chaos{t: t, Unavailable: map[string][]time.Duration{}}).awaitFailover(c, l, term, cutAt)
	// The cut holds for the rest of the test: without the silence bound
	// the clients would wait for it to heal.
	sent, arrived := roundTrip("after", 20*time.Second)
	t.Logf("leader %s cut off: another elected after %s; a send begun then took %s, and arrived %s after it began (%s after the cut)",
		l.ID, elected.Round(time.Millisecond), sent.Round(time.Millisecond), arrived.Round(time.Millisecond), time.Since(cutAt).Round(time.Millisecond))
	if after := time.Since(cutAt); after > 15*time.Second {
		t.Fatalf("the clients went on with the new leader %s after the cut: the silence bound is about 3 s", after)
	}
}
