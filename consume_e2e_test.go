package qmq_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/transport"
)

// sendTagged sends a message of subject with tags and returns its id.
func sendTagged(ctx context.Context, t *testing.T, p *qmq.Producer, subject string, tags ...string) string {
	t.Helper()
	m := p.GenerateMessage(subject)
	for _, tag := range tags {
		m.AddTag(tag)
	}
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	return m.ID()
}

// pullUntil pulls with c until the message last arrives, acking all, and
// returns the ids received before it in order.
func pullUntil(ctx context.Context, t *testing.T, c *qmq.Puller, last string) []string {
	t.Helper()
	var got []string
	for ctx.Err() == nil {
		msgs, err := c.Pull(ctx, 100, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Ack(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.ID() == last {
				return got
			}
			got = append(got, m.ID())
		}
	}
	t.Fatalf("%s never arrived; had %v", last, got)
	return nil
}

// pullN pulls with c until n messages have come, and returns them.
func pullN(ctx context.Context, t *testing.T, c *qmq.Puller, n int, what string) []*qmq.Message {
	t.Helper()
	var got []*qmq.Message
	poll.Until(t, 20*time.Second, what, func() bool {
		msgs, err := c.Pull(ctx, 10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
		return len(got) == n
	})
	return got
}

func newPuller(t *testing.T, n *server.Node, subject, group string, opts ...qmq.PullerOption) *qmq.Puller {
	t.Helper()
	c, err := qmq.NewPuller(n.ClientAddr(), subject, group, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// WithTags receives messages with any of its tags, WithAllTags those with
// every one.
func TestTagFilters(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	red := sendTagged(ctx, t, p, "paints", "red")
	sendTagged(ctx, t, p, "paints", "blue")
	both := sendTagged(ctx, t, p, "paints", "blue", "red")
	sendTagged(ctx, t, p, "paints")
	green := sendTagged(ctx, t, p, "paints", "green", "red")
	last := sendTagged(ctx, t, p, "paints", "red", "blue", "green")

	anyOf := newPuller(t, n, "paints", "reds", qmq.StartAt(qmq.Earliest), qmq.WithTags("red", "green"))
	if got, want := pullUntil(ctx, t, anyOf, last), []string{red, both, green}; !slices.Equal(got, want) {
		t.Errorf("WithTags(red, green) received %v, want %v", got, want)
	}
	allOf := newPuller(t, n, "paints", "purples", qmq.StartAt(qmq.Earliest), qmq.WithAllTags("red", "blue"))
	if got, want := pullUntil(ctx, t, allOf, last), []string{both}; !slices.Equal(got, want) {
		t.Errorf("WithAllTags(red, blue) received %v, want %v", got, want)
	}
}

// Tags are checked when the consumer is made: at most message.MaxTags, each
// 1 to message.MaxTagLen bytes.
func TestTagBounds(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr() // a consumer registers before it is made
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "t" + strings.Repeat("x", i)
		}
		return out
	}
	for _, tc := range []struct {
		tags []string
		ok   bool
	}{
		{many(message.MaxTags - 1), true},
		{many(message.MaxTags), true},
		{many(message.MaxTags + 1), false},
		{[]string{strings.Repeat("t", message.MaxTagLen-1)}, true},
		{[]string{strings.Repeat("t", message.MaxTagLen)}, true},
		{[]string{strings.Repeat("t", message.MaxTagLen+1)}, false},
		{[]string{""}, false},
	} {
		for _, opt := range []qmq.ConsumerOption{qmq.WithTags(tc.tags...), qmq.WithAllTags(tc.tags...)} {
			c, err := qmq.NewPuller(addr, "s", "g", opt)
			if err == nil {
				c.Close()
			}
			sub, serr := qmq.Subscribe(addr, "s", "g", nil, opt, qmq.WithLogger(nil))
			if serr == nil {
				sub.Stop()
			}
			for _, e := range []error{err, serr} {
				if (e == nil) != tc.ok || (e != nil && !errors.Is(e, qmq.ErrInvalidOption)) {
					t.Errorf("%d tags, the longest %d bytes: %v, want ok %v (or ErrInvalidOption)", len(tc.tags),
						len(slices.MaxFunc(tc.tags, func(a, b string) int { return len(a) - len(b) })), e, tc.ok)
				}
			}
		}
	}
}

// A consumer that pulls at most once has its messages counted as consumed
// as they are handed out: when it dies with them unacknowledged, they do
// not come again.
func TestAtMostOnceIsNeverRedelivered(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, func(c *server.Config) { c.SessionTimeout = 300 * time.Millisecond })
	sendJobs(ctx, t, p, 3)
	a, err := qmq.NewPuller(n.ClientAddr(), "jobs", "workers", qmq.WithConsumerName("a"), qmq.StartAt(qmq.Earliest), qmq.WithAtMostOnce())
	if err != nil {
		t.Fatal(err)
	}
	got := pullN(ctx, t, a, 3, "the three messages")
	if err := a.Ack(ctx, got...); err != nil {
		t.Fatalf("ack of messages pulled at most once (nothing to send): %v", err)
	}
	if err := got[0].InProgress(ctx); err != nil {
		t.Fatalf("InProgress of a message pulled at most once (nothing to send): %v", err)
	}
	a.Close() // a dies; its session expires
	poll.Until(t, 20*time.Second, "the dead consumer reclaimed", func() bool {
		return n.FSM().Epoch(fsm.ConsumerID{Subject: "jobs", ConsumerGroup: "workers", Consumer: "a"}) == 0
	})
	marker := sendTagged(ctx, t, p, "jobs")
	b := newPuller(t, n, "jobs", "workers")
	if again := pullUntil(ctx, t, b, marker); len(again) != 0 {
		t.Fatalf("messages pulled at most once came again: %v", again)
	}
}

// Every broadcast consumer receives every message sent after it joined,
// as a consumer group of its own that the broker forgets once idle.
func TestBroadcastReachesEveryInstance(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	sendJobs(ctx, t, p, 2) // before anyone joined: nobody gets them
	var mu sync.Mutex
	got := map[string]map[string]bool{}
	var subs []*qmq.Subscription
	for _, name := range []string{"i1", "i2"} {
		got[name] = map[string]bool{}
		sub, err := qmq.Subscribe(n.ClientAddr(), "jobs", "cache", func(_ context.Context, m *qmq.Message) error {
			mu.Lock()
			defer mu.Unlock()
			got[name][m.ID()] = true
			return nil
		}, qmq.WithConsumerName(name), qmq.WithBroadcast(0), qmq.WithPullWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop()
		if sub.Group() != "cache."+name {
			t.Fatalf("broadcast group %q, want cache.%s", sub.Group(), name)
		}
		subs = append(subs, sub)
	}
	poll.Until(t, 20*time.Second, "both broadcast groups on the broker", func() bool {
		var groups []transport.ConsumerGroupInfo
		groupCall(t, n, transport.TypeConsumerGroups, transport.ConsumerGroupsRequest{Subject: "jobs"}, &groups)
		for _, g := range groups {
			if g.Settings.IdleExpiry != qmq.DefaultBroadcastExpiry {
				t.Fatalf("group %s idle expiry %s, want %s", g.ConsumerGroup, g.Settings.IdleExpiry, qmq.DefaultBroadcastExpiry)
			}
		}
		return len(groups) == 2
	})
	sent := sendAll(t, p, "jobs", 20)
	poll.Until(t, 20*time.Second, "every message at both instances", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["i1"]) >= 20 && len(got["i2"]) >= 20
	})
	mu.Lock()
	defer mu.Unlock()
	for name, ids := range got {
		if !maps.Equal(ids, sent) {
			t.Errorf("%s received %d messages, want exactly the %d sent after it joined", name, len(ids), len(sent))
		}
	}
}

// A broadcast group's name, the group and the consumer name joined by a
// dot, keeps to the name bound; its expiry to 1 s .. two years.
func TestBroadcastBounds(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	group := strings.Repeat("g", 100)
	for _, tc := range []struct {
		consumer string
		expiry   time.Duration
		ok       bool
	}{
		{strings.Repeat("c", limits.MaxName-len(group)-2), 0, true},
		{strings.Repeat("c", limits.MaxName-len(group)-1), 0, true},
		{strings.Repeat("c", limits.MaxName-len(group)), 0, false},
		{"c", time.Second - time.Millisecond, false},
		{"c", time.Second, true},
		{"c", limits.DefaultMaxDelay, true},
		{"c", limits.DefaultMaxDelay + time.Millisecond, false},
		{"c", -time.Second, false},
	} {
		c, err := qmq.NewPuller(addr, "s", group, qmq.WithConsumerName(tc.consumer), qmq.WithBroadcast(tc.expiry))
		if err == nil {
			c.Close()
		}
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, qmq.ErrInvalidOption)) {
			t.Errorf("broadcast as a %d-byte consumer of a %d-byte group, expiry %s: %v, want ok %v (or ErrInvalidOption)",
				len(tc.consumer), len(group), tc.expiry, err, tc.ok)
		}
	}
}

// A new group starts at the latest message by default, at the earliest
// with StartAt(Earliest), and at the first stored at or after a time with
// StartAtTime.
func TestStartPositions(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	first := []string{sendTagged(ctx, t, p, "jobs"), sendTagged(ctx, t, p, "jobs")}
	// A time after the first messages were stored, reached before the next.
	at := time.UnixMilli(time.Now().UnixMilli() + 1)
	poll.Until(t, 5*time.Second, "the clock past the start time", func() bool { return time.Now().After(at) })
	second := []string{sendTagged(ctx, t, p, "jobs"), sendTagged(ctx, t, p, "jobs")}

	latest := newPuller(t, n, "jobs", "latest")
	if msgs, err := latest.Pull(ctx, 10, 0); err != nil || len(msgs) != 0 {
		t.Fatalf("a new group's first pull at the latest message: %d messages, %v; want none", len(msgs), err)
	}
	third := sendTagged(ctx, t, p, "jobs")
	last := sendTagged(ctx, t, p, "jobs")
	if got, want := pullUntil(ctx, t, latest, last), []string{third}; !slices.Equal(got, want) {
		t.Errorf("latest (the default) received %v, want %v", got, want)
	}
	earliest, err := qmq.NewPuller(n.ClientAddr(), "jobs", "earliest", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pullUntil(ctx, t, earliest, last), slices.Concat(first, second, []string{third}); !slices.Equal(got, want) {
		t.Errorf("earliest received %v, want %v", got, want)
	}
	earliest.Close()
	fromTime := newPuller(t, n, "jobs", "from-time", qmq.StartAtTime(at))
	if got, want := pullUntil(ctx, t, fromTime, last), slices.Concat(second, []string{third}); !slices.Equal(got, want) {
		t.Errorf("StartAtTime received %v, want %v", got, want)
	}
	// The start position applies only when the pull creates the group.
	again := newPuller(t, n, "jobs", "earliest", qmq.StartAt(qmq.Latest))
	marker := sendTagged(ctx, t, p, "jobs")
	if got := pullUntil(ctx, t, again, marker); len(got) != 0 {
		t.Errorf("an existing group consumed again: %v", got)
	}
}

// InProgress gives a message its group's whole ack wait again: another
// consumer of the group does not get it while it is extended, and gets it
// once an ack wait passes after the last extension.
func TestInProgressHoldsOffTheAckWait(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	wait := time.Second
	groupCall(t, n, transport.TypeSetConsumerGroup, transport.SetConsumerGroupRequest{Subject: "jobs", ConsumerGroup: "workers",
		AckWait: &wait, Start: transport.StartEarliest}, nil)
	sendJobs(ctx, t, p, 1)
	a := newPuller(t, n, "jobs", "workers")
	held := pullN(ctx, t, a, 1, "the message")
	b := newPuller(t, n, "jobs", "workers")
	// Three ack waits of work, extended twice per ack wait: without the
	// extensions the message goes to b within two.
	var extended time.Time // before the last extension: the broker's deadline is an ack wait after it at least
	for end := time.Now().Add(3 * wait); time.Now().Before(end); {
		extended = time.Now()
		if err := held[0].InProgress(ctx); err != nil {
			t.Fatal(err)
		}
		if msgs, err := b.Pull(ctx, 10, wait/2); err != nil || len(msgs) != 0 {
			t.Fatalf("while extended, another consumer pulled %d messages (%v)", len(msgs), err)
		}
	}
	again := pullN(ctx, t, b, 1, "the message at the other consumer")
	if now := time.Now(); now.Before(extended.Add(wait)) || again[0].Deliveries() != 2 {
		t.Fatalf("handed again %s after the last extension (delivery %d), want an ack wait (%s) at least, delivery 2",
			now.Sub(extended), again[0].Deliveries(), wait)
	}
}

// A subscription pulls only what its workers can start: a message does not
// wait in the client behind slow handlers until its ack wait passes, to be
// handed out again and counted a delivery. (With the defaults, 64 pulled
// for 4 workers, a handler slower than about 1.9 s made the tail of every
// batch expire: 10 messages, a handler that always succeeds, 14 calls and
// a dead letter.) Here: an ack wait of 1 s, one worker, handlers of
// 300 ms, ten messages: each is handled once.
func TestSlowHandlersLetNothingExpire(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	adm, err := admin.New(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ackWait := time.Second
	if _, err := adm.SetConsumerGroup(ctx, "jobs", "workers", admin.ConsumerGroupChanges{AckWait: &ackWait, Start: transport.StartEarliest}); err != nil {
		t.Fatal(err)
	}
	sent := map[string]bool{}
	for range 10 {
		m := p.GenerateMessage("jobs")
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		sent[m.ID()] = true
	}
	var mu sync.Mutex
	calls := map[string]int{}
	done := make(chan struct{})
	s, err := qmq.Subscribe(n.ClientAddr(), "jobs", "workers", func(_ context.Context, m *qmq.Message) error {
		time.Sleep(300 * time.Millisecond) // the handler's work
		mu.Lock()
		defer mu.Unlock()
		if calls[m.ID()]++; len(calls) == len(sent) && calls[m.ID()] == 1 {
			close(done)
		}
		return nil
	}, qmq.WithWorkers(1), qmq.WithPullWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("not every message was handled")
	}
	if err := s.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, k := range calls {
		if !sent[id] || k != 1 {
			t.Errorf("message %s handled %d times", id, k)
		}
	}
}
