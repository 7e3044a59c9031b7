package qmq_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

// A message of exactly qmq.MaxMessageSize travels every path: a send
// frame, a Raft entry, the message log (or a schedule record and then the
// message log), and a pull reply that the client accepts. One byte more is
// refused by the SDK and by the broker. Before the limit was defined once,
// the broker accepted a message that filled a send frame, and its pull
// reply came out 2 bytes over the frame limit: the client dropped the
// connection, and the retry met the same message first, blocking the
// consumer group for good.
func TestLimitsFitEveryPath(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)

	// The largest message a send frame can carry: refused by the broker,
	// which the SDK would have refused before sending.
	gc, err := transport.NewLeaderClient([]string{n.ClientAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	frameFull := testmsg.OfSize("frame-full", "big", 0, limits.MaxFrame-9-1-1) // less the frame header, version and count
	req := (&transport.SendRequest{Messages: []*message.Message{frameFull}}).Encode()
	if len(req)+9 != limits.MaxFrame {
		t.Fatalf("request frame of %d bytes, want exactly %d", len(req)+9, limits.MaxFrame)
	}
	if _, err := gc.Call(ctx, transport.TypeSend, req); transport.CodeOf(err) != transport.TooLarge {
		t.Fatalf("send of a frame-filling message: %v, want TOO_LARGE", err)
	}

	over := p.GenerateMessage("big")
	fillTo(over, limits.MaxMessage+1)
	if err := p.SendMessage(ctx, over); !errors.Is(err, qmq.ErrMessageTooLarge) {
		t.Fatalf("SDK send of MaxMessageSize+1 bytes: %v, want ErrMessageTooLarge", err)
	}

	var sent []*qmq.Message
	for i, delay := range []time.Duration{0, 500 * time.Millisecond} {
		m := p.GenerateMessage("big")
		if delay > 0 {
			m.SetDelay(delay)
		}
		fillTo(m, limits.MaxMessage-i) // exactly at the limit, and one under
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("send of a message of %d bytes: %v", limits.MaxMessage-i, err)
		}
		sent = append(sent, m)
	}
	small := p.GenerateMessage("big")
	small.SetBody([]byte("after"))
	if err := p.SendMessage(ctx, small); err != nil {
		t.Fatal(err)
	}

	c, err := qmq.NewPuller(n.ClientAddr(), "big", "g", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]*qmq.Message{}
	for len(got) < 3 && ctx.Err() == nil {
		msgs, err := c.Pull(ctx, 10, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got[m.ID()] = m
		}
		if err := c.Ack(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range append(sent, small) {
		r := got[m.ID()]
		if r == nil {
			t.Fatalf("message %s never arrived (got %d of 3)", m.ID(), len(got))
		}
		if !bytes.Equal(r.Body(), m.Body()) || r.String("p000") != m.String("p000") {
			t.Fatalf("message %s arrived changed", m.ID())
		}
	}
}

// fillTo gives m a body and properties that make its encoding size bytes,
// as testmsg builds them.
func fillTo(m *qmq.Message, size int) {
	shape := testmsg.OfSize(m.ID(), m.Subject(), deliverAtOf(m), size)
	m.SetBody(shape.Body)
	for _, p := range shape.Properties {
		m.SetString(p.Key, p.Value)
	}
}

func deliverAtOf(m *qmq.Message) int64 {
	if at := m.DeliverAt(); !at.IsZero() {
		return at.UnixMilli()
	}
	return 0
}

// The SDK refuses pull settings the broker would refuse on every pull
// (a Subscription with them used to receive nothing, for ever).
func TestPullSettingsWithinLimits(t *testing.T) {
	n := testcluster.Broker(t, nil)
	h := func(context.Context, *qmq.Message) error { return nil }
	for _, opt := range []qmq.SubscribeOption{qmq.WithPullBatch(limits.MaxPullMessages + 1), qmq.WithPullWait(limits.MaxPullWait + time.Millisecond)} {
		if sub, err := qmq.Subscribe(n.ClientAddr(), "s", "g", h, opt); err == nil {
			sub.Close()
			t.Fatal("a subscription with settings over the limits was accepted")
		}
	}
	sub, err := qmq.Subscribe(n.ClientAddr(), "s", "g", h, qmq.WithPullBatch(limits.MaxPullMessages), qmq.WithPullWait(limits.MaxPullWait))
	if err != nil {
		t.Fatalf("settings at the limits: %v", err)
	}
	sub.Close()
	p, err := qmq.NewPuller(n.ClientAddr(), "s", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Pull(context.Background(), limits.MaxPullMessages+1, time.Millisecond); err == nil {
		t.Fatal("a pull of more than the limit was sent")
	}
}
