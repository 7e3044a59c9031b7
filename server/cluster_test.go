package server

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// startGroup starts a bootstrapped node and joins two more to it through
// the join request, as qmqctl join does; tweak (if any) adjusts each
// node's configuration, by node id.
func startGroup(t testing.TB, tweak ...func(id string, c *Config)) []*Node {
	t.Helper()
	config := func(id string) func(*Config) {
		return func(c *Config) {
			for _, f := range tweak {
				f(id, c)
			}
		}
	}
	n1 := startNode(t, "n1", true, config("n1"))
	waitLeader(t, n1)
	nodes := []*Node{n1}
	adm, err := admin.New(n1.ClientAddr(), connOf(n1.cfg.TLS))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	for _, id := range []string{"n2", "n3"} {
		n := startNode(t, id, false, config(id))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := adm.Join(ctx, n1.cfg.BrokerGroup, id, cmp.Or(n.cfg.RaftAdvertiseAddr, n.cfg.RaftAddr), n.ClientAddr())
		cancel()
		if err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	waitFor(t, 10*time.Second, "every member to apply the joins", func() bool {
		for _, n := range nodes {
			if n.fsm.Applied() != n1.fsm.Applied() || n.fsm.MemberAddr("n3") == "" {
				return false
			}
		}
		return true
	})
	return nodes
}

// clientAddrs returns the client addresses of nodes.
func clientAddrs(nodes []*Node) []string {
	addrs := make([]string, 0, len(nodes))
	for _, n := range nodes {
		addrs = append(addrs, n.ClientAddr())
	}
	return addrs
}

func leaderOf(nodes []*Node) *Node {
	for _, n := range nodes {
		if n.isLeader() {
			return n
		}
	}
	return nil
}

func TestFollowerAnswersNotLeaderWithAddress(t *testing.T) {
	nodes := startGroup(t)
	leader := leaderOf(nodes)
	for _, n := range nodes {
		if n == leader {
			continue
		}
		c, err := transport.Dial(context.Background(), n.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		req := &transport.SendRequest{Messages: []*message.Message{{ID: "x", Subject: "s"}}}
		_, err = c.Call(context.Background(), transport.TypeSend, req.Encode())
		c.Close()
		var e *transport.Error
		if !errors.As(err, &e) || e.Code != transport.NotLeader || e.Leader != leader.ClientAddr() {
			t.Fatalf("follower %s answered %v, want NOT_LEADER naming %s", n.cfg.ID, err, leader.ClientAddr())
		}
	}
}

// TestLeaderLossCostsLatencyNotErrors stops the leader while producers
// send: every send still succeeds (the SDK follows the new leader and
// retries with the same ids), and every acknowledged message is consumed.
func TestLeaderLossCostsLatencyNotErrors(t *testing.T) {
	nodes := startGroup(t)
	var addrs string
	for i, n := range nodes {
		if i > 0 {
			addrs += ","
		}
		addrs += n.ClientAddr()
	}
	p, err := qmq.NewProducer(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const total = 600
	var acked atomic.Int64
	var mu sync.Mutex
	sent := map[string]bool{}
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				m := p.GenerateMessage("payments")
				if err := p.SendMessage(ctx, m); err != nil {
					t.Errorf("send failed across a leader change: %v", err)
					continue
				}
				mu.Lock()
				sent[m.ID()] = true
				mu.Unlock()
				acked.Add(1)
			}
		}()
	}
	old := leaderOf(nodes)
	for i := range total {
		if i == total/2 {
			waitFor(t, 10*time.Second, "half the sends", func() bool { return acked.Load() >= total/4 })
			old.Close()
		}
		work <- i
	}
	close(work)
	wg.Wait()

	var rest []*Node
	for _, n := range nodes {
		if n != old {
			rest = append(rest, n)
		}
	}
	waitFor(t, 10*time.Second, "a new leader", func() bool { return leaderOf(rest) != nil })
	puller, err := qmq.NewPuller(rest[0].ClientAddr()+","+rest[1].ClientAddr(), "payments", "check", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer puller.Close()
	got := map[string]bool{}
	for len(got) < len(sent) && ctx.Err() == nil {
		msgs, err := puller.Pull(ctx, 500, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if !sent[m.ID()] {
				t.Fatalf("consumed %s, which was never acknowledged", m.ID())
			}
			got[m.ID()] = true
		}
		if err := puller.Ack(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != total {
		t.Fatalf("consumed %d distinct messages, %d were acknowledged", len(got), total)
	}
}

// TestBadFramesDoNotHurtTheNode sends garbage to a node's client port: the
// node closes those connections and keeps serving.
func TestBadFramesDoNotHurtTheNode(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	inputs := [][]byte{
		{0xff, 0xff, 0xff, 0x7f},                // oversize length
		{2, 0, 0, 0, 1, 2},                      // length below the header
		{20, 0, 0, 0, byte(transport.TypeSend)}, // truncated frame
		append([]byte{12, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0}, 0xff, 0xff, 0xff), // pull with garbage payload
	}
	for _, in := range inputs {
		c, err := net.Dial("tcp", n.ClientAddr())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(in)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		r := bufio.NewReader(c)
		for {
			f, err := transport.ReadFrame(r, transport.DefaultMaxFrame)
			if err != nil {
				break
			}
			if _, err := transport.DecodeStatus(f.Payload); err == nil {
				t.Fatalf("input %x got an OK answer", in)
			}
		}
		c.Close()
	}
	adm, err := admin.New(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if st, err := adm.Status(context.Background(), n.ClientAddr()); err != nil || st.State != "Leader" {
		t.Fatalf("after bad input: status %+v, %v", st, err)
	}
}

func TestTransferLeader(t *testing.T) {
	nodes := startGroup(t)
	old := leaderOf(nodes)
	var target *Node
	for _, n := range nodes {
		if n != old {
			target = n
			break
		}
	}
	adm, err := admin.New(old.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := adm.TransferLeader(ctx, target.cfg.BrokerGroup, target.cfg.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the target to lead", func() bool { return target.isLeader() })
	if err := adm.TransferLeader(ctx, target.cfg.BrokerGroup, "nobody"); transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("transfer to a non-member: %v, want INVALID", err)
	}
}
