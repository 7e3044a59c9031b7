package test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// TestFullDisk runs a three-node group as processes on small disks (a
// tmpfs each, where the machine allows it) and fills them: one node's and
// then every node's under the send floor, where sends are refused with
// DISK_FULL and consumers are still served; and the leader's under the
// state machine's reserve, where it cannot apply and hands leadership to a
// node with room. Emptied, the group takes sends again, every
// acknowledged message is consumed, no node stopped, and the replicas are
// byte-identical.
func TestFullDisk(t *testing.T) {
	const floor, reserve = 64 << 20, 16 << 20
	c := NewCluster(t, "g1", "--election-timeout", "500ms",
		"--min-free-disk", fmt.Sprint(floor>>20), "--disk-reserve", fmt.Sprint(reserve>>20))
	c.UseSmallDisks(256 << 20)
	c.Form("", "n1", "n2", "n3")
	t.Logf("small disks are %s", map[bool]string{true: "tmpfs mounts", false: "fault injection (--disk-free-file)"}[c.SmallDisksReal()])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := qmq.NewProducer(c.ClientAddrs(), qmq.WithSendTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acked := map[string]bool{}
	send := func(what string, n int) {
		t.Helper()
		for i := range n {
			m := p.GenerateMessage("orders")
			m.SetBody([]byte(fmt.Sprintf("%s %d", what, i)))
			if err := p.SendMessage(ctx, m); err != nil {
				t.Fatalf("send (%s): %v", what, err)
			}
			acked[m.ID()] = true
		}
	}
	consumer, err := qmq.NewPuller(c.ClientAddrs(), "orders", "billing", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := map[string]bool{}
	consume := func(what string) {
		t.Helper()
		for missing := len(acked) - len(got); missing > 0; missing = len(acked) - len(got) {
			msgs, err := consumer.Pull(ctx, 100, time.Second)
			if err != nil {
				t.Fatalf("pull (%s): %v", what, err)
			}
			if err := consumer.Ack(ctx, msgs...); err != nil {
				t.Fatalf("ack (%s): %v", what, err)
			}
			for _, m := range msgs {
				got[m.ID()] = true
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: %d acknowledged messages not consumed", what, missing)
			}
		}
	}
	refused := func(n *Node) error {
		conn, err := transport.Dial(ctx, n.ClientAddr)
		if err != nil {
			return err
		}
		defer conn.Close()
		req := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprint("probe-", time.Now().UnixNano()), Subject: "probe", CreatedAt: 1}}}
		_, err = conn.Call(ctx, transport.TypeSend, req.Encode())
		if transport.CodeOf(err) != transport.DiskFull {
			return fmt.Errorf("send to %s: %v, want DISK_FULL", n.ID, err)
		}
		return nil
	}
	send("before", 200)
	consume("before")

	// The leader under the floor: sends refused, consumers served.
	leader, _, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(leader.FillDisk(floor / 2))
	c.WaitFor(10*time.Second, leader.ID+" refuses sends", func() error { return refused(leader) })
	send("filling", 0)
	leader.EmptyDisk()
	send("after the leader's disk", 50)
	consume("after the leader's disk")

	// The leader under the reserve: it cannot apply, hands over, and the
	// group takes sends from its new leader.
	leader, st, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	t.Log(leader.FillDisk(reserve / 4))
	c.WaitFor(30*time.Second, "a leader other than "+leader.ID, func() error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if msgs, err := consumer.Pull(pctx, 1, 100*time.Millisecond); err == nil && len(msgs) > 0 { // a command to apply
			if consumer.Ack(pctx, msgs...) == nil {
				got[msgs[0].ID()] = true
			}
		}
		l, lst, err := c.Leader()
		if err != nil {
			return err
		}
		if l == leader || lst.Term <= st.Term {
			return fmt.Errorf("%s leads in term %d", l.ID, lst.Term)
		}
		return nil
	})
	send("while a follower waits for space", 50)
	leader.EmptyDisk()
	consume("once every disk has room")

	// Every node under the floor: no sends anywhere, consumers served.
	send("before every disk fills", 50)
	for _, n := range c.Nodes() {
		t.Log(n.FillDisk(floor / 2))
	}
	c.WaitFor(10*time.Second, "sends refused by the leader", func() error {
		l, _, err := c.Leader()
		if err != nil {
			return err
		}
		return refused(l)
	})
	consume("with every disk under the floor")
	for _, n := range c.Nodes() {
		n.EmptyDisk()
	}
	send("at the end", 50)
	consume("at the end")
	c.SameReplicas(time.Minute)
}
