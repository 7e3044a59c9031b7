package qmq_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/testcluster"
)

// brokerAndProducer starts a one-node group (tweaked) with a producer for
// it, and a context for the test's sends.
func brokerAndProducer(t *testing.T, tweak func(*server.Config)) (*server.Node, *qmq.Producer, context.Context) {
	t.Helper()
	n := testcluster.Broker(t, tweak)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return n, p, ctx
}

// TestDelayedMessagesAreNeverEarly sends messages due over the next two
// seconds beside ordinary ones, and checks that every one arrives, none
// before its delivery time; it logs how late they were.
func TestDelayedMessagesAreNeverEarly(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	due := map[string]time.Time{}
	start := time.Now()
	for i := range 300 {
		m := p.GenerateMessage("reminders")
		if i%3 != 0 {
			m.SetDelay(time.Duration(200+i*6) * time.Millisecond)
		}
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
		due[m.ID()] = m.DeliverAt()
	}
	var mu sync.Mutex
	var late []time.Duration
	c := newCollector(len(due))
	s, err := qmq.Subscribe(n.ClientAddr(), "reminders", "g", func(ctx context.Context, m *qmq.Message) error {
		now := time.Now()
		mu.Lock()
		at := due[m.ID()]
		if !at.IsZero() {
			if now.Before(at) {
				t.Errorf("%s arrived %s early", m.ID(), at.Sub(now))
			}
			if !m.DeliverAt().Equal(at.Truncate(time.Millisecond)) {
				t.Errorf("%s arrived with delivery time %s, sent with %s", m.ID(), m.DeliverAt(), at)
			}
			late = append(late, now.Sub(at))
		}
		mu.Unlock()
		return c.handle(ctx, m)
	}, qmq.StartAt(qmq.Earliest), qmq.WithPullWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	select {
	case <-c.done:
	case <-ctx.Done():
		t.Fatalf("%d of %d arrived", len(c.got), len(due))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d delayed messages over %s; lateness %s", len(late), time.Since(start).Round(time.Millisecond), describeLateness(late))
}

func describeLateness(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	sorted := slices.Sorted(slices.Values(d))
	return "p50 " + sorted[len(sorted)/2].String() + ", p99 " + sorted[len(sorted)*99/100].String() + ", max " + sorted[len(sorted)-1].String()
}

// TestDelayLimits: a time in the past is an ordinary message, stored at
// once; a delivery two years ahead is accepted and pending in its hour;
// one past the maximum is refused by the producer, and by a broker whose
// maximum is shorter than the producer's.
func TestDelayLimits(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, func(c *server.Config) { c.MaxDelay = 365 * 24 * time.Hour })

	past := p.GenerateMessage("limits")
	past.SetDeliverAt(time.Now().Add(-time.Hour))
	if err := p.SendMessage(ctx, past); err != nil {
		t.Fatal(err)
	}
	if held := n.FSM().Ends().Consume["limits"]; held != logs.ConsumeRecordSize {
		t.Fatalf("a past delivery time: the subject holds %d bytes of entries once acknowledged, want one entry", held)
	}

	tooFar := p.GenerateMessage("limits")
	tooFar.SetDelay(qmq.DefaultMaxDelay + time.Minute)
	if err := p.SendMessage(ctx, tooFar); !errors.Is(err, qmq.ErrDelayTooLong) {
		t.Fatalf("a delay past the producer's maximum: %v, want ErrDelayTooLong", err)
	}

	// The broker here allows one year: a producer allowing two is refused
	// by the broker, with its reason.
	twoYears := p.GenerateMessage("limits")
	twoYears.SetDelay(730 * 24 * time.Hour)
	err := p.SendMessage(ctx, twoYears)
	if err == nil || !strings.Contains(err.Error(), "maximum delay") {
		t.Fatalf("a delay past the broker's maximum: %v", err)
	}
	if d := n.FSM().Delays(); d.Pending != 0 {
		t.Fatalf("a refused message is pending: %+v", d)
	}
}

// TestTwoYearDelayIsAccepted: the default maximum takes a delivery two
// years ahead; it waits in its hour.
func TestTwoYearDelayIsAccepted(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	m := p.GenerateMessage("anniversary")
	m.SetDelay(730 * 24 * time.Hour)
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatalf("a two-year delay: %v", err)
	}
	d := n.FSM().Delays()
	wantHour := m.DeliverAt().UnixMilli() / time.Hour.Milliseconds()
	if d.Pending != 1 || len(d.Hours) != 1 || d.Hours[0].Hour != wantHour || d.Subjects["anniversary"] != 1 {
		t.Fatalf("delay stats %+v, want one pending in hour %d", d, wantHour)
	}
	if held := n.FSM().Ends().Consume["anniversary"]; held != 0 {
		t.Fatal("a message due in two years is already in its subject")
	}
	a, err := admin.New(n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	groups, err := a.Delays(ctx)
	if err != nil || len(groups) != 1 || groups[0].Pending != 1 || groups[0].Subjects["anniversary"] != 1 ||
		groups[0].Hours[0].Hour != m.DeliverAt().UTC().Truncate(time.Hour).Format(time.RFC3339) {
		t.Fatalf("Delays = %+v, %v", groups, err)
	}
}
