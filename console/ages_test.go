package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
	"github.com/qmqgo/qmq/internal/limits"
)

// A consumer group's page says, per broker group, when the oldest message
// it has not handed out was appended (its backlog's age) and when the
// first retained one was (the subject's retention horizon), as the stored
// messages say; a group that owes nothing has no oldest.
func TestConsumerGroupAges(t *testing.T) {
	f := start(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.a.SetConsumerGroup(ctx, "audit", "readers", admin.ConsumerGroupChanges{Start: 1}); err != nil {
		t.Fatal(err)
	}
	p, err := qmq.NewProducer(f.meta)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		if err := p.SendMessage(ctx, p.GenerateMessage("audit")); err != nil {
			t.Fatal(err)
		}
	}
	zero := int64(0)
	pages, err := f.a.Messages(ctx, admin.MessageQuery{Subject: "audit", FromSeq: &zero})
	if err != nil || len(pages) != 1 || len(pages[0].Messages) != 3 {
		t.Fatalf("the stored messages: %+v, %v", pages, err)
	}
	stored := pages[0].Messages

	get := func() console.BrokerGroupAge {
		t.Helper()
		var v struct {
			Total admin.ConsumerGroupInfo `json:"total"`
			Ages  []console.BrokerGroupAge
		}
		f.get(t, "/api/v1/subjects/audit/consumer-groups/readers", &v)
		if len(v.Ages) != 1 || v.Ages[0].BrokerGroup != "g1" || v.Ages[0].Error != "" {
			t.Fatalf("ages: %+v", v.Ages)
		}
		return v.Ages[0]
	}
	a := get()
	if a.OldestPendingSeq != stored[0].Seq || !a.OldestPendingAt.Equal(stored[0].AppendedAt) || !a.RetainedSince.Equal(stored[0].AppendedAt) || a.OldestPendingAgeMillis < 0 {
		t.Errorf("nothing handed out: %+v, want the oldest and the first retained at %v", a, stored[0].AppendedAt)
	}

	c, err := qmq.NewPuller(f.meta, "audit", "readers")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []*qmq.Message
	for len(got) == 0 {
		if got, err = c.Pull(ctx, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
	if a := get(); a.OldestPendingSeq != stored[1].Seq || !a.OldestPendingAt.Equal(stored[1].AppendedAt) || !a.RetainedSince.Equal(stored[0].AppendedAt) {
		t.Errorf("one handed out: %+v, want the oldest at %v and the first retained at %v", a, stored[1].AppendedAt, stored[0].AppendedAt)
	}
	for len(got) < 3 {
		more, err := c.Pull(ctx, 2, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, more...)
		if err := c.Ack(ctx, more...); err != nil {
			t.Fatal(err)
		}
	}
	if a := get(); a.OldestPendingSeq != 0 || !a.OldestPendingAt.IsZero() || a.OldestPendingAgeMillis != 0 || !a.RetainedSince.Equal(stored[0].AppendedAt) {
		t.Errorf("all handed out: %+v, want no oldest", a)
	}
}

// A subject's view gives each broker group of its route the messages
// appended in the last minute, counted exactly from consume sequences
// (more than a listing's 1,000), and its retention horizon; a subject
// without a route is an error.
func TestSubjectView(t *testing.T) {
	f := start(t, false)
	const n = limits.MaxQueryResults + 5
	sendN(t, f, "meters", n)
	var v console.SubjectView
	f.get(t, "/api/v1/subjects/meters", &v)
	zero := int64(0)
	pages, err := f.a.Messages(context.Background(), admin.MessageQuery{Subject: "meters", FromSeq: &zero, Limit: 1})
	if err != nil || len(pages) != 1 || len(pages[0].Messages) != 1 || pages[0].End != n {
		t.Fatalf("the stored messages: %+v, %v", pages, err)
	}
	if v.Route == nil || v.Route.Subject != "meters" || len(v.BrokerGroups) != 1 || v.RateWindow != "1m0s" {
		t.Fatalf("subject view %+v", v)
	}
	g := v.BrokerGroups[0]
	if g.BrokerGroup != "g1" || !g.Writable || g.LastWindow != n || g.PerSecond != n/60.0 ||
		!g.RetainedSince.Equal(pages[0].Messages[0].AppendedAt) || g.Error != "" {
		t.Errorf("meters in g1: %+v, want %d in the last minute, retained since %v", g, n, pages[0].Messages[0].AppendedAt)
	}
	if v.LastWindow != n || v.PerSecond != n/60.0 {
		t.Errorf("meters: %d in the last minute, %v a second; want %d summed", v.LastWindow, v.PerSecond, n)
	}
	for path, want := range map[string]int{"/api/v1/subjects/nothing-sent": 400, "/api/v1/subjects/meters?x=1": 400, "/api/v1/subjects/bad%20name": 400} {
		if st, b := f.do(t, nil, "GET", path, "", nil); st != want {
			t.Errorf("GET %s: %d %s, want %d", path, st, b, want)
		}
	}
}
