package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// fakeDisk is a data disk whose free space a test sets.
type fakeDisk struct{ free atomic.Int64 }

func newFakeDisk() *fakeDisk {
	d := &fakeDisk{}
	d.free.Store(1 << 40)
	return d
}

func (d *fakeDisk) probe(string) (int64, error) { return d.free.Load(), nil }

// caller is a LeaderClient or a Conn.
type caller interface {
	Call(ctx context.Context, t transport.Type, payload []byte) ([]byte, error)
}

func sendOne(ctx context.Context, gc caller, id string) error {
	req := &transport.SendRequest{Messages: []*message.Message{{ID: id, Subject: "s", CreatedAt: 1, Body: []byte("x")}}}
	_, err := gc.Call(ctx, transport.TypeSend, req.Encode())
	return err
}

// Under MinFreeDisk the leader refuses sends with DISK_FULL
// and goes on serving consumers; once space is back it takes sends again.
// Before, it proposed them until the disk was full and every replica
// failed the same write.
func TestDiskFullRefusesSendsNotConsumers(t *testing.T) {
	d := newFakeDisk()
	n := startNode(t, "n1", true, func(c *Config) { c.FSM.DiskFree = d.probe })
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	conn, err := transport.Dial(ctx, n.ClientAddr()) // no retries: each answer as it is
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 3 {
		if err := sendOne(ctx, gc, fmt.Sprint("m", i)); err != nil {
			t.Fatal(err)
		}
	}
	d.free.Store(n.cfg.MinFreeDisk - 1) // under the floor, above the state machine's reserve
	probes := 0
	waitFor(t, 5*time.Second, "sends refused", func() bool {
		probes++ // a new id each time: the refusing leader answers a duplicate of one it stored
		return transport.CodeOf(sendOne(ctx, conn, fmt.Sprint("refused-", probes))) == transport.DiskFull
	})
	err = sendOne(ctx, conn, "refused")
	if e, ok := err.(*transport.Error); !ok || e.Code != transport.DiskFull || !n.Status().DiskFull {
		t.Fatalf("send with the disk full: %v (status %+v)", err, n.Status())
	}
	// The refusal looked first: a message stored before (a retry whose
	// first reply was lost) is answered a duplicate, and only the others
	// are refused, so that a producer moves only those to another group.
	req := &transport.SendRequest{Messages: []*message.Message{
		{ID: "m1", Subject: "s", CreatedAt: 1, Body: []byte("x")}, {ID: "fresh", Subject: "s", CreatedAt: 1, Body: []byte("x")}}}
	body, err := conn.Call(ctx, transport.TypeSend, req.Encode())
	if err != nil {
		t.Fatalf("a refused send holding a stored message: %v", err)
	}
	sent, err := transport.DecodeSendResponse(body)
	if err != nil || len(sent.Results) != 2 || sent.Results[0].Status != transport.SendDuplicate ||
		sent.Results[1].Status != transport.SendRejected || transport.CodeOf(transport.ParseRejection(sent.Results[1].Error)) != transport.DiskFull {
		t.Fatalf("a refused send of a stored message and a new one: %+v, %v", sent, err)
	}
	pull := &transport.PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Wait: time.Second, Start: transport.StartEarliest}
	body, err = gc.Call(ctx, transport.TypePull, pull.Encode())
	if err != nil {
		t.Fatalf("pull with the disk full: %v", err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil || len(resp.Messages) < 3 { // a send may have passed before the check saw the disk
		t.Fatalf("pull with the disk full: %d messages, %v", len(resp.Messages), err)
	}
	ack := &transport.AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: resp.Epoch, Ranges: []message.AckRange{{First: 0, Last: int64(len(resp.Messages) - 1)}}}
	if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
		t.Fatalf("ack with the disk full: %v", err)
	}
	d.free.Store(1 << 40)
	waitFor(t, 5*time.Second, "sends taken again", func() bool { return sendOne(ctx, conn, "after") == nil })
}

// A leader whose disk is too short to apply hands leadership to a voter
// with room, even with no entry waiting, so the group goes on taking sends; the
// starved node catches up once space is back, and the replicas stay
// identical.
func TestLeaderWithoutSpaceHandsOver(t *testing.T) {
	disks := map[string]*fakeDisk{"n1": newFakeDisk(), "n2": newFakeDisk(), "n3": newFakeDisk()}
	nodes := startGroup(t, func(id string, c *Config) { c.FSM.DiskFree = disks[id].probe })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	addrs := clientAddrs(nodes)
	gc, err := transport.NewLeaderClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if err := sendOne(ctx, gc, "before"); err != nil {
		t.Fatal(err)
	}
	old := leaderOf(nodes)
	disks[old.cfg.ID].free.Store(0) // nothing left: it cannot apply, nor take sends
	// Nothing is sent meanwhile: a leader whose disk cannot take its next
	// entry hands over before any entry makes it wait.
	waitFor(t, 20*time.Second, "another leader", func() bool { return leaderOf(nodes) != nil && leaderOf(nodes) != old })
	waitFor(t, 20*time.Second, "a send taken by another leader", func() bool {
		return sendOne(ctx, gc, "after") == nil && leaderOf(nodes) != old
	})
	if !old.Status().ApplyWaiting && old.fsm.Applied() == leaderOf(nodes).fsm.Applied() {
		t.Log("the old leader applied everything before its disk filled")
	}
	disks[old.cfg.ID].free.Store(1 << 40)
	waitFor(t, 20*time.Second, "every replica caught up", func() bool {
		l := leaderOf(nodes)
		for _, n := range nodes {
			if l == nil || n.fsm.Applied() != l.fsm.Applied() || n.Status().ApplyWaiting {
				return false
			}
		}
		return true
	})
	if err := old.FailedErr(); err != nil {
		t.Fatalf("the starved node stopped: %v", err)
	}
}

// A producer whose group refuses a send with DISK_FULL moves it to
// another broker group of the subject, as it does from a drained group;
// nothing is stored in the full group.
func TestProducerMovesAwayFromAFullDisk(t *testing.T) {
	m := startMeta(t, "m1", true)
	full := newFakeDisk()
	g1 := startNode(t, "g1-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat = "g1", []string{m.ClientAddr()}, 100*time.Millisecond
		c.FSM.DiskFree = full.probe
	})
	g2 := startMetaBroker(t, "g2", m)
	a := newAdmin(t, m.ClientAddr())
	for _, g := range []string{"g1", "g2"} {
		waitFor(t, 10*time.Second, g+" available", func() bool { ok, _ := groupAvailable(t, a, g); return ok })
	}
	ctx := ctxFor(t, 30*time.Second)
	if r, err := a.Assign(ctx, "orders", []string{"g1", "g2"}, 0); err != nil || len(r.BrokerGroups) != 2 {
		t.Fatalf("assign: %+v, %v", r, err)
	}
	full.free.Store(0)
	p, err := qmq.NewProducer(m.ClientAddr(), qmq.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		msg := p.GenerateMessage("orders")
		msg.SetInt("n", int64(i))
		if err := p.SendMessage(ctx, msg); err != nil {
			t.Fatalf("send %d with g1's disk full: %v", i, err)
		}
	}
	if got := g1.Status().Backlog; got != 0 {
		t.Fatalf("g1 holds %d messages with its disk full", got)
	}
	if !g1.FSM().HasSubject("orders") && !g2.FSM().HasSubject("orders") {
		t.Fatal("the messages are nowhere")
	}
	if g1.FSM().HasSubject("orders") {
		t.Fatal("g1, whose disk is full, stored messages")
	}
}

// A refusal does not say a message is stored nowhere while an earlier send
// of it is still being stored: it answers that one UNAVAILABLE (try
// again), and refuses only the others. Here the earlier send waits for
// disk space to be applied; once applied, it succeeds.
func TestRefusalWaitsForASendBeingStored(t *testing.T) {
	d := newFakeDisk()
	n := startNode(t, "n1", true, func(c *Config) { c.MinFreeDisk, c.FSM.DiskFree = 1<<20, d.probe })
	waitLeader(t, n)
	waitSettled(t, n)
	ctx := ctxFor(t, 30*time.Second)
	conn, err := transport.Dial(ctx, n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d.free.Store(n.cfg.FSM.DiskReserve / 2) // above the send floor, too little to apply
	earlier := make(chan error, 1)
	go func() { earlier <- sendOne(ctx, clientOf(t, n.ClientAddr()), "a") }()
	waitFor(t, 10*time.Second, "the earlier send queued", func() bool {
		return n.batcher.queued([]*message.Message{{ID: "a"}})[0]
	})
	d.free.Store(0) // under the send floor too
	waitFor(t, 5*time.Second, "the leader to see its disk full", func() bool { full, _ := n.disk.full(); return full })
	req := &transport.SendRequest{Messages: []*message.Message{
		{ID: "a", Subject: "s", CreatedAt: 1, Body: []byte("x")}, {ID: "b", Subject: "s", CreatedAt: 1, Body: []byte("x")}}}
	body, err := conn.Call(ctx, transport.TypeSend, req.Encode())
	if err != nil {
		t.Fatalf("a refused send of a message being stored: %v", err)
	}
	resp, err := transport.DecodeSendResponse(body)
	if err != nil || len(resp.Results) != 2 ||
		transport.CodeOf(transport.ParseRejection(resp.Results[0].Error)) != transport.Unavailable ||
		transport.CodeOf(transport.ParseRejection(resp.Results[1].Error)) != transport.DiskFull {
		t.Fatalf("a refused send of a message being stored and a new one: %+v, %v", resp, err)
	}
	d.free.Store(1 << 40)
	if err := <-earlier; err != nil {
		t.Fatalf("the earlier send, once the disk had room: %v", err)
	}
	if err := sendOne(ctx, conn, "a"); err != nil {
		t.Fatal(err)
	}
}

// A refusal whose leader is deposed while it looks for the send's
// messages says nothing of where they are: it answers UNAVAILABLE (try
// again), not the refusal. A send this leader proposed may have failed
// meanwhile with the lost leadership, left the record of sends being
// stored unseen, and still be committed by the next leader: the refusal
// told the producer it was stored nowhere, and it moved.
func TestRefusalByALeaderDeposedWhileLookingAsksAgain(t *testing.T) {
	d := newFakeDisk()
	var armed atomic.Bool
	var group atomic.Pointer[[]*Node]
	nodes := startGroup(t, func(_ string, c *Config) {
		c.MinFreeDisk, c.FSM.DiskFree = 1<<40, d.probe
		c.afterRefusalLook = func() {
			if !armed.CompareAndSwap(true, false) {
				return
			}
			if err := leaderOf(*group.Load()).raft.LeadershipTransfer().Error(); err != nil {
				t.Errorf("transfer: %v", err)
			}
		}
	})
	group.Store(&nodes)
	l := leaderOf(nodes)
	waitSettled(t, l)
	ctx := ctxFor(t, 30*time.Second)
	conn, err := transport.Dial(ctx, l.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d.free.Store(1 << 39) // every node under the send floor, above the apply reserve
	waitFor(t, 5*time.Second, "the leader to see its disk full", func() bool { full, _ := l.disk.full(); return full })
	armed.Store(true)
	err = sendOne(ctx, conn, "a")
	if c := transport.CodeOf(err); c != transport.Unavailable || !strings.Contains(err.Error(), "leadership changed") {
		t.Fatalf("a refusal by a leader deposed while it looked: %v, want UNAVAILABLE", err)
	}
	if armed.Load() {
		t.Fatal("the refusal never looked")
	}
}

// A refusing leader whose clock is not anchored to its voters' yet for its
// term does not look: its own clock may run ahead, and ids still within
// their dedup window would look past it (it answered "stored nowhere" for
// them, and the producer moved them). It answers UNAVAILABLE, try again.
func TestRefusalWaitsForTheTermsClock(t *testing.T) {
	d := newFakeDisk()
	n := startNode(t, "n1", true, func(c *Config) { c.MinFreeDisk, c.FSM.DiskFree = 1<<40, d.probe })
	waitLeader(t, n)
	waitSettled(t, n)
	ctx := ctxFor(t, 30*time.Second)
	conn, err := transport.Dial(ctx, n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d.free.Store(1 << 39) // under the send floor, above the apply reserve
	waitFor(t, 5*time.Second, "the leader to see its disk full", func() bool { full, _ := n.disk.full(); return full })
	if err := sendOne(ctx, conn, "a"); transport.CodeOf(err) != transport.DiskFull {
		t.Fatalf("a refusal by an anchored leader: %v, want DISK_FULL", err)
	}
	n.clock.mu.Lock()
	n.clock.term = 0 // as between its election and its anchoring
	n.clock.mu.Unlock()
	if err := sendOne(ctx, conn, "a"); transport.CodeOf(err) != transport.Unavailable || !strings.Contains(err.Error(), "voters' clocks") {
		t.Fatalf("a refusal by a leader whose clock is not anchored for its term: %v, want UNAVAILABLE", err)
	}
}

// waitSettled waits until leader n has applied its predecessors' entries,
// anchored its clock, recorded the group identity and seeded the group's
// configuration: a test that then fills its disk stops none of these
// entries half way (a leader's sends wait for them).
func waitSettled(t *testing.T, n *Node) {
	t.Helper()
	waitFor(t, 10*time.Second, "the leader settled in its term", func() bool {
		anchored, _ := n.clock.anchoredFor(n.raft.CurrentTerm())
		return n.appliedTerm.Load() == n.raft.CurrentTerm() && anchored && n.fsm.Identity() != "" &&
			n.fsm.BrokerConfig().Source == fsm.ConfigGroup
	})
}
