package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
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
	req := transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: "c", Max: 8, Wait: time.Second, Start: transport.StartEarliest}
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
		if g, _ := n.FSM().ConsumerGroup("blobs", "g"); g.Unacked != received {
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
		req := transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: fmt.Sprint("c", i), Max: 10, Wait: 20 * time.Second,
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
	m := &message.Message{ID: "big", Subject: "blobs", CreatedAt: 1, Body: make([]byte, 8<<20)}
	if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{m}}).Encode()); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// One connection sends 12 pulls of it (the same consumer, each asking
	// from 0, each willing to wait) and never reads the replies.
	c, err := net.Dial("tcp", n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := bufio.NewWriter(c)
	const pulls = 12
	req := (&transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: "c", Max: 1, Start: transport.StartEarliest, Wait: 30 * time.Second}).Encode()
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

// TestPullWaitsForMemoryBeforeHandingOut: while another connection that
// does not read its replies holds most of the memory budget, a pull whose
// message does not fit what is free hands out nothing before it has that
// memory: its client, giving up meanwhile, loses nothing (at most once),
// starts no ack wait and counts no delivery (at least once), and gets the
// message once memory is free.
func TestPullWaitsForMemoryBeforeHandingOut(t *testing.T) {
	for _, amo := range []bool{true, false} {
		t.Run(map[bool]string{true: "at most once", false: "at least once"}[amo], func(t *testing.T) {
			n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 12 << 20 })
			waitLeader(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			gc := clientOf(t, n.ClientAddr())
			hog := &message.Message{ID: "hog", Subject: "hog", CreatedAt: 1, Body: make([]byte, 8<<20)}
			if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{hog}}).Encode()); err != nil {
				t.Fatal(err)
			}
			sendBlobs(t, ctx, gc, 1, 6<<20)
			c, err := net.Dial("tcp", n.ClientAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w := bufio.NewWriter(c)
			const pulls = 6
			hreq := (&transport.PullRequest{Subject: "hog", ConsumerGroup: "g", Consumer: "c", Max: 1, Start: transport.StartEarliest, Wait: 30 * time.Second}).Encode()
			for i := range pulls {
				transport.WriteFrame(w, transport.Frame{Type: transport.TypePull, ID: uint64(i + 1), Payload: hreq})
			}
			w.Flush()
			waitFor(t, 20*time.Second, "the unread replies to hold the memory", func() bool { return n.client.Stats().InFlightBytes >= 8<<20 })
			// The pull waits for the memory within its own wait, and then
			// answers empty, never later: its client waits a little longer.
			req := transport.PullRequest{Subject: "blobs", ConsumerGroup: "g", Consumer: "victim", Max: 10, Wait: time.Second, Start: transport.StartEarliest, AtMostOnce: amo}
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			body, err := gc.Call(pctx, transport.TypePull, req.Encode())
			pcancel()
			if err != nil {
				t.Fatalf("a pull waiting for memory past its wait: %v", err)
			}
			if resp, _ := transport.DecodePullResponse(body); len(resp.Messages) != 0 {
				t.Fatal("the pull was answered with its message while the memory was held")
			}
			if g, _ := n.FSM().ConsumerGroup("blobs", "g"); g.Unacked != 0 || g.Lag() != 1 {
				t.Fatalf("the pull handed out its message without the memory for it: %+v", g)
			}
			c.Close() // the memory is free again
			req.Wait = 10 * time.Second
			body, err = gc.Call(ctx, transport.TypePull, req.Encode())
			if err != nil {
				t.Fatal(err)
			}
			if resp, _ := transport.DecodePullResponse(body); len(resp.Messages) != 1 {
				t.Fatalf("once memory was free the pull carried %d messages, want 1", len(resp.Messages))
			}
		})
	}
}

// The Acks of gone entries merge their ranges and hold at most
// limits.MaxAckRanges each, so every one decodes however many went.
func TestGoneAcksDecode(t *testing.T) {
	id := fsm.ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "c"}
	var sparse, dense []int64
	for s := range int64(2*limits.MaxAckRanges + 1) {
		sparse, dense = append(sparse, 2*s), append(dense, s)
	}
	for name, c := range map[string]struct {
		seqs []int64
		acks int
	}{"sparse": {sparse, 3}, "dense": {dense, 1}, "one": {[]int64{7}, 1}} {
		acks := goneAcks(1, id, 2, c.seqs)
		if len(acks) != c.acks {
			t.Fatalf("%s: %d acks, want %d", name, len(acks), c.acks)
		}
		n := int64(0)
		for _, a := range acks {
			got, err := fsm.Decode(a.Encode())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, r := range got.(*fsm.Ack).Ranges {
				n += r.Last - r.First + 1
			}
		}
		if n != int64(len(c.seqs)) {
			t.Fatalf("%s: acks name %d sequences, want %d", name, n, len(c.seqs))
		}
	}
}
