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
// and the rest come with the next pulls.
func TestPullRepliesCountAgainstTheBudget(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.ClientLimits.Memory = 3 << 20 })
	waitFor(t, 10*time.Second, "leadership", func() bool { return n.Status().State == "Leader" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gc := clientOf(t, n.ClientAddr())
	for i := range 8 {
		m := &logs.Message{ID: fmt.Sprint("big-", i), Subject: "blobs", CreatedAt: 1, Body: make([]byte, 1<<20)}
		if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*logs.Message{m}}).Encode()); err != nil {
			t.Fatal(err)
		}
	}
	got, from, epoch := 0, int64(0), uint64(0)
	for pulls := 0; got < 8; pulls++ {
		req := &transport.PullRequest{Subject: "blobs", Group: "g", Consumer: "c", Max: 8, Wait: time.Second, From: from, Epoch: epoch, Start: transport.StartEarliest}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 || len(resp.Messages) > 2 {
			t.Fatalf("pull %d carried %d messages of 1 MiB; the budget holds 3 MiB", pulls, len(resp.Messages))
		}
		got += len(resp.Messages)
		from, epoch = resp.Messages[len(resp.Messages)-1].PullSeq+1, resp.Epoch
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
