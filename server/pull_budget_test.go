package server

import (
	"bufio"
	"context"
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
// and the rest come with the next pulls.
func TestPullRepliesCountAgainstTheBudget(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 3 << 20 })
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	sendBlobs(t, ctx, gc, 8, 1<<20)
	req := transport.PullRequest{Subject: "blobs", Group: "g", Consumer: "c", Max: 8, Wait: time.Second, Start: transport.StartEarliest}
	pullEach(t, ctx, gc, req, 8, func(pull int, resp *transport.PullResponse) {
		if len(resp.Messages) == 0 || len(resp.Messages) > 2 {
			t.Fatalf("pull %d carried %d messages of 1 MiB; the budget holds 3 MiB", pull, len(resp.Messages))
		}
	})
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
