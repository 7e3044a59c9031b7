package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// A pull reply takes its bytes from the client listener's memory budget
// until it is written: with 3 MiB of budget, a pull of eight 1 MiB
// messages carries two (it used to carry up to 8 MiB whatever the budget),
// and the rest come with the next pulls. The pull hands out only what its
// reply carries: the others start no ack wait and count no delivery (the
// pull used to hand out all eight and leave six out of its reply).
func TestPullRepliesCountAgainstTheBudget(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 3 << 20 })
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	sendBlobs(t, ctx, gc, 8, 1<<20)
	req := transport.PullRequest{Subject: "blobs", Group: "g", Consumer: "c", Max: 8, Wait: time.Second, Start: transport.StartEarliest}
	received := 0
	pullEach(t, ctx, gc, req, 8, func(pull int, resp *transport.PullResponse) {
		if len(resp.Messages) == 0 || len(resp.Messages) > 2 {
			t.Fatalf("pull %d carried %d messages of 1 MiB; the budget holds 3 MiB", pull, len(resp.Messages))
		}
		received += len(resp.Messages)
		for _, m := range resp.Messages {
			if m.Deliveries != 1 {
				t.Fatalf("pull %d: pull sequence %d delivered %d times", pull, m.PullSeq, m.Deliveries)
			}
		}
		if g, _ := n.FSM().Group("blobs", "g"); g.Unacked != received {
			t.Fatalf("after pull %d the consumer holds %d unacked, its replies carried %d", pull, g.Unacked, received)
		}
	})
}

// A pull that hands out nothing gives back the reply memory it took
// before proposing, and holds none while it waits: a tag filter that
// matches nothing takes the most a reply may need.
func TestWaitingPullsHoldNoReplyMemory(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	sendBlobs(t, ctx, gc, 1, 10)
	const pulls = 4
	errs := make(chan error, pulls)
	for i := range pulls {
		req := transport.PullRequest{Subject: "blobs", Group: "g", Consumer: fmt.Sprint("c", i), Max: 10, Wait: 20 * time.Second,
			Start: transport.StartEarliest, Tags: []string{"none"}}
		go func() {
			_, err := gc.Call(ctx, transport.TypePull, req.Encode())
			errs <- err
		}()
	}
	waitFor(t, 10*time.Second, "the pulls registered", func() bool { return len(n.FSM().Consumers()) == pulls })
	// Each waiting pull holds its request's charge (its payload and 4 KiB),
	// not the reply's 8 MiB.
	waitFor(t, 10*time.Second, "the waiting pulls holding only their requests", func() bool {
		return n.client.Stats().InFlightBytes < pulls*64<<10
	})
	cancel()
	for range pulls {
		<-errs
	}
}

// A pull takes its message's bytes from the budget before it reads the
// message: pulls waiting for memory hold nothing the budget does not
// count (each used to read its 8 MiB message first, then wait).
func TestPullsWaitingForMemoryHoldNoMessage(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 12 << 20 })
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	m := &logs.Message{ID: "big", Subject: "blobs", CreatedAt: 1, Body: make([]byte, 8<<20)}
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*logs.Message{m}}).Encode()); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// One connection sends 12 pulls of it (the same consumer, each asking
	// from 0) and never reads the replies.
	c, err := net.Dial("tcp", n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := bufio.NewWriter(c)
	const pulls = 12
	req := (&transport.PullRequest{Subject: "blobs", Group: "g", Consumer: "c", Max: 1, Start: transport.StartEarliest}).Encode()
	for i := range pulls {
		transport.WriteFrame(w, transport.Frame{Type: transport.TypePull, ID: uint64(i + 1), Payload: req})
	}
	w.Flush()
	waitFor(t, 20*time.Second, "pulls waiting for reply memory", func() bool { return n.client.Stats().WaitingForMemory >= pulls-2 })
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 40<<20 {
		t.Fatalf("%d pulls waiting for a 12 MiB budget hold %d MiB", pulls, grown>>20)
	}
}
