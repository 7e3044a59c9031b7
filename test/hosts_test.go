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
