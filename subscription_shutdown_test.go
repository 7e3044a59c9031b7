package qmq_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
)

// gate is a handler that records what it was given, and holds the first
// message until released (or, with onCtx, until its context is done).
type gate struct {
	mu      sync.Mutex
	got     []string
	ctxErr  error // what the held handler's context said when it let go
	release chan struct{}
	onCtx   bool
}

func newGate(onCtx bool) *gate { return &gate{release: make(chan struct{}), onCtx: onCtx} }

func (g *gate) handle(ctx context.Context, m *qmq.Message) error {
	g.mu.Lock()
	g.got = append(g.got, m.ID())
	first := len(g.got) == 1
	g.mu.Unlock()
	if !first {
		return nil
	}
	if g.onCtx {
		<-ctx.Done()
		g.mu.Lock()
		g.ctxErr = ctx.Err()
		g.mu.Unlock()
		return ctx.Err()
	}
	<-g.release
	return nil
}

func (g *gate) handled() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.got)
}

// heldSubscription sends n jobs, then subscribes one worker as consumer
// "sub" and waits until it holds the first in its handler: the others
// came in the same pull and wait to be handed out.
func heldSubscription(t *testing.T, n int, g *gate) (*server.Node, *qmq.Subscription, []string) {
	t.Helper()
	node, p, ctx := brokerAndProducer(t, nil)
	var sent []string
	for range n {
		m := p.GenerateMessage("jobs")
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m.ID())
	}
	sub, err := qmq.Subscribe(node.ClientAddr(), "jobs", "workers", g.handle,
		qmq.WithConsumerName("sub"), qmq.StartAt(qmq.Earliest), qmq.WithWorkers(1), qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Stop)
	poll.Until(t, 20*time.Second, "the first message held by its handler", func() bool { return len(g.handled()) == 1 })
	return node, sub, sent
}

// takeOver pulls, as a new consumer with the subscription's name, what
// the subscription left unacknowledged: it has it at once.
func takeOver(t *testing.T, n *server.Node, want int) []string {
	t.Helper()
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.WithConsumerName("sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msgs, err := c.Pull(t.Context(), 10, 0)
	if err != nil || len(msgs) != want {
		t.Fatalf("taking over the consumer: %d messages (%v), want the %d it left", len(msgs), err, want)
	}
	return ids(msgs)
}

// Drain hands every message already pulled to the handlers, waits for
// them and acknowledges them before it returns.
func TestDrainHandlesEveryPulledMessage(t *testing.T) {
	g := newGate(false)
	n, sub, sent := heldSubscription(t, 5, g)
	drained := make(chan error, 1)
	go func() { drained <- sub.Drain(t.Context()) }()
	close(g.release)
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
	// A subscription pulls only what its workers can start soon, so how
	// many were pulled depends on the handlers' pace; each one pulled was
	// handled and acknowledged, the rest wait in the group.
	got := g.handled()
	if len(got) == 0 || !slices.Equal(got, sent[:len(got)]) {
		t.Fatalf("drain handled %v, want the first of %v", got, sent)
	}
	if b := n.FSM().Backlog(); b != int64(len(sent)-len(got)) {
		t.Fatalf("backlog %d once Drain returned, having handled %d of %d: acks were not flushed", b, len(got), len(sent))
	}
	if err := sub.Drain(t.Context()); err != nil {
		t.Fatalf("a second drain: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("close after drain: %v", err)
	}
}

// Stop lets the running handler finish and acknowledges it, hands out
// nothing more, and leaves the rest to the consumer's next life.
func TestStopLeavesWhatIsNotHandedOut(t *testing.T) {
	g := newGate(false)
	n, sub, sent := heldSubscription(t, 5, g)
	stopped := make(chan struct{})
	go func() { sub.Stop(); close(stopped) }()
	poll.Until(t, 20*time.Second, "Stop begun", func() bool { return qmq.Leaving(sub) })
	select {
	case <-stopped:
		t.Fatal("Stop returned while a handler was running")
	default:
	}
	close(g.release)
	<-stopped
	if got := g.handled(); !slices.Equal(got, sent[:1]) {
		t.Fatalf("handled %v after Stop, want only the running %v", got, sent[:1])
	}
	if b := n.FSM().Backlog(); b != 4 {
		t.Fatalf("backlog %d once Stop returned, want the 4 left: the running handler's ack was not flushed", b)
	}
	if left := takeOver(t, n, 4); !slices.Equal(left, sent[1:]) {
		t.Fatalf("left %v, want %v", left, sent[1:])
	}
}

// A handler that waits on its context is released when Drain's context
// ends: Drain cancels it, leaves what was not handed out, and says so; the
// message whose handler it cut short goes back to the group at once.
func TestDrainGivesUpOnItsHandlers(t *testing.T) {
	g := newGate(true)
	n, sub, sent := heldSubscription(t, 3, g)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	err := sub.Drain(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain past its context: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	g.mu.Lock()
	ctxErr := g.ctxErr
	g.mu.Unlock()
	if !errors.Is(ctxErr, context.Canceled) {
		t.Fatalf("the held handler's context ended with %v, want it cancelled", ctxErr)
	}
	if got := g.handled(); len(got) != 1 {
		t.Fatalf("handled %v, want only the held one", got)
	}
	// The two not handed out are still the consumer's; the held one, cut
	// short, was nacked back to the group at once.
	c, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.WithConsumerName("sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deliveries := map[string]int{}
	poll.Until(t, 20*time.Second, "every message back", func() bool {
		msgs, err := c.Pull(t.Context(), 10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			deliveries[m.ID()] = m.Deliveries()
		}
		return len(deliveries) == len(sent)
	})
	for i, id := range sent {
		want := 1 // handed again to the same consumer: the same delivery
		if i == 0 {
			want = 2
		}
		if deliveries[id] != want {
			t.Errorf("message %d came back on its delivery %d, want %d", i, deliveries[id], want)
		}
	}
}

// Close is a Drain bounded by its own timeout.
func TestCloseGivesUpAfterItsTimeout(t *testing.T) {
	g := newGate(true)
	_, sub, _ := heldSubscription(t, 2, g)
	qmq.SetCloseTimeout(sub, 200*time.Millisecond)
	if err := sub.Close(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close with a handler that outlives it: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !errors.Is(g.ctxErr, context.Canceled) {
		t.Fatalf("the held handler's context ended with %v, want it cancelled", g.ctxErr)
	}
}
