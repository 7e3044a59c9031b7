package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/transport"
)

// mustRun runs qmqctl and fails the test on an error.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(args...)
	if err != nil {
		t.Fatalf("qmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runJSON runs qmqctl with --json appended and decodes what it printed
// on stdout (durations written as Go duration strings).
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	args = append(args, "--json")
	out, stderr, status := runCLIStatus(args...)
	if status != 0 {
		t.Fatalf("qmqctl %s: exit status %d\n%s%s", strings.Join(args, " "), status, out, stderr)
	}
	if err := decodeJSON([]byte(out), v); err != nil {
		t.Fatalf("qmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// showGroup returns `consumer-group show` of orders/billing.
func showGroup(t *testing.T, server string) admin.ConsumerGroupView {
	t.Helper()
	var v admin.ConsumerGroupView
	runJSON(t, &v, "--server", server, "consumer-group", "show", "--subject", "orders", "--group", "billing")
	return v
}

// pullAndNack pulls every message of subject for group from each broker
// group of the subject's route and nacks them all; it returns how many.
func pullAndNack(t *testing.T, server, subject, group string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := admin.New(server)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r, err := a.Route(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range r.BrokerGroups {
		gc, err := transport.NewLeaderClient(g.Servers)
		if err != nil {
			t.Fatal(err)
		}
		defer gc.Close()
		pull := &transport.PullRequest{Subject: subject, ConsumerGroup: group, Consumer: "c1", Max: 100, Wait: 100 * time.Millisecond}
		body, err := gc.Call(ctx, transport.TypePull, pull.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Messages) == 0 {
			continue
		}
		var ranges []message.AckRange
		for _, m := range resp.Messages {
			ranges = append(ranges, message.AckRange{First: m.PullSeq, Last: m.PullSeq})
		}
		nack := &transport.NackRequest{Subject: subject, ConsumerGroup: group, Consumer: "c1", Epoch: resp.Epoch, Ranges: ranges}
		if _, err := gc.Call(ctx, transport.TypeNack, nack.Encode()); err != nil {
			t.Fatal(err)
		}
		n += len(resp.Messages)
	}
	return n
}

// TestConsumerGroupAndDeadLetterCommands runs every consumer-group and
// dead-letter command against a metaserver and two broker groups.
func TestConsumerGroupAndDeadLetterCommands(t *testing.T) {
	srv := startCluster(t)
	s := []string{"--server", srv}
	g := []string{"--subject", "orders", "--group", "billing"}
	run := func(args ...string) string { return mustRun(t, append(s, args...)...) }

	// Set up before anything is sent: every broker group of the new
	// subject creates the group, at its latest (empty) end.
	out := run(append([]string{"consumer-group", "set"}, append(g, "--max-deliveries", "1", "--retry-first", "0s", "--retry-max", "1s")...)...)
	if strings.Count(out, "(created)") != 2 {
		t.Fatalf("group set of a new group:\n%s", out)
	}
	var res []admin.ConsumerGroupResult
	runJSON(t, &res, append(s, append([]string{"consumer-group", "set"}, append(g, "--ack-wait", "0", "--max-in-flight", "100000", "--idle-expiry", "0")...)...)...)
	if len(res) != 2 || res[0].Created || res[1].Created {
		t.Fatalf("group set of a known group: %+v", res)
	}

	before := time.Now().Add(-time.Second)
	p, err := qmq.NewProducer(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const sent = 6
	for i := range sent {
		m := p.GenerateMessage("orders")
		m.SetBody([]byte(fmt.Sprintf("order-%d", i)))
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	v := showGroup(t, srv)
	want := admin.ConsumerGroupSettings{MaxDeliveries: 1, RetryFirst: 0, RetryMax: time.Second, AckWait: 0, MaxInFlight: 100000}
	if len(v.BrokerGroups) != 2 || v.Total.Backlog != sent || v.Total.Lag != sent || v.Total.Settings != want || v.SettingsDiffer {
		t.Fatalf("group show after %d sends: %+v", sent, v)
	}
	for _, bg := range v.BrokerGroups {
		if bg.Backlog == 0 || bg.End != bg.Backlog {
			t.Errorf("broker group %s holds %d of %d (end %d): the sends should be spread", bg.BrokerGroup, bg.Backlog, sent, bg.End)
		}
	}
	out = run(append([]string{"consumer-group", "show"}, g...)...)
	for _, w := range []string{"consumer group billing of orders", "g1", "g2", "TOTAL", "max-deliveries 1,", "ack-wait none", "max-in-flight 100000", "idle-expiry never"} {
		if !strings.Contains(out, w) {
			t.Errorf("group show does not say %q:\n%s", w, out)
		}
	}
	out = run("consumer-group", "list")
	if !strings.Contains(out, "orders") || !strings.Contains(out, "billing") || !strings.Contains(out, "LAG") {
		t.Errorf("group list:\n%s", out)
	}
	var views []admin.ConsumerGroupView
	runJSON(t, &views, append(s, "consumer-group", "list", "--subject", "orders")...)
	if len(views) != 1 || views[0].Group != "billing" || views[0].Total.Lag != sent {
		t.Errorf("group list --subject orders: %+v", views)
	}

	// Every message fails its only delivery: all become dead letters.
	if n := pullAndNack(t, srv, "orders", "billing"); n != sent {
		t.Fatalf("pulled and nacked %d, want %d", n, sent)
	}
	if v := showGroup(t, srv); v.Total.DeadLetters != sent || v.Total.Lag != 0 {
		t.Fatalf("group show after the nacks: %+v", v.Total)
	}
	var pages []admin.DeadLetterPage
	runJSON(t, &pages, append(s, append([]string{"deadletter", "list"}, g...)...)...)
	total := 0
	for _, pg := range pages {
		total += pg.Total
		for _, d := range pg.Letters {
			if d.Deliveries != 1 || d.Size == 0 || d.Removed {
				t.Errorf("dead letter %+v of %s", d, pg.BrokerGroup)
			}
		}
	}
	if len(pages) != 2 || total != sent {
		t.Fatalf("deadletter list: %+v", pages)
	}
	var one []admin.DeadLetterPage
	runJSON(t, &one, append(s, append([]string{"deadletter", "list"}, append(g, "--offset", "1", "--limit", "1")...)...)...)
	if len(one) != 2 || len(one[0].Letters) != 1 || one[0].Letters[0].Seq != pages[0].Letters[1].Seq {
		t.Errorf("deadletter list --offset 1 --limit 1: %+v", one)
	}
	out = run(append([]string{"deadletter", "list"}, g...)...)
	if !strings.Contains(out, "SEQ") || !strings.Contains(out, " kept, ") {
		t.Errorf("deadletter list:\n%s", out)
	}

	bg, seq := pages[0].BrokerGroup, fmt.Sprint(pages[0].Letters[0].Seq)
	var d admin.DeadLetter
	runJSON(t, &d, append(s, append([]string{"deadletter", "show"}, append(g, "--broker-group", bg, "--seq", seq)...)...)...)
	if !strings.HasPrefix(string(d.Body), "order-") || d.ID == "" {
		t.Errorf("deadletter show: %+v", d)
	}
	out = run(append([]string{"deadletter", "show"}, append(g, "--broker-group", bg, "--seq", seq)...)...)
	if !strings.Contains(out, "body        order-") {
		t.Errorf("deadletter show:\n%s", out)
	}
	if out, err := runCLI(append(s, append([]string{"deadletter", "show"}, append(g, "--broker-group", bg, "--seq", "999")...)...)...); err == nil || !strings.Contains(err.Error(), "no such dead letter") {
		t.Errorf("deadletter show of a sequence not kept: %v\n%s", err, out)
	}
	if out, err := runCLI(append(s, append([]string{"deadletter", "show"}, append(g, "--broker-group", "g9", "--seq", seq)...)...)...); err == nil || !strings.Contains(err.Error(), "not in the subject's route") {
		t.Errorf("deadletter show in a broker group not of the route: %v\n%s", err, out)
	}

	out = run(append([]string{"deadletter", "resend"}, append(g, "--broker-group", bg, "--seq", seq)...)...)
	if !strings.Contains(out, "broker group "+bg+": 1 dead letter resent") {
		t.Errorf("deadletter resend:\n%s", out)
	}
	if v := showGroup(t, srv); v.Total.DeadLetters != sent-1 || v.Total.Lag != 1 {
		t.Errorf("group show after a resend: %+v", v.Total)
	}
	var done []admin.DeadLetterResult
	runJSON(t, &done, append(s, append([]string{"deadletter", "purge", "--yes"}, append(g, "--all")...)...)...)
	if len(done) != 2 || done[0].Done+done[1].Done != sent-1 {
		t.Errorf("deadletter purge --all: %+v", done)
	}
	if v := showGroup(t, srv); v.Total.DeadLetters != 0 {
		t.Errorf("group show after the purge: %+v", v.Total)
	}
	out = run(append([]string{"deadletter", "purge", "--yes"}, append(g, "--broker-group", bg, "--seq", seq)...)...)
	if !strings.Contains(out, "0 dead letters purged") {
		t.Errorf("deadletter purge of one not kept:\n%s", out)
	}

	for _, c := range []struct {
		to   string
		lag  int64
		what string
	}{
		{"earliest", sent, "everything again"},
		{"latest", 0, "the backlog skipped"},
		{before.UTC().Format(time.RFC3339), sent, "everything sent since"},
		{time.Now().Add(time.Hour).UTC().Format(time.RFC3339), 0, "nothing sent since"},
	} {
		out := run(append([]string{"consumer-group", "reset", "--yes"}, append(g, "--to", c.to)...)...)
		if strings.Count(out, "reset to "+c.to) != 2 {
			t.Errorf("group reset --to %s:\n%s", c.to, out)
		}
		if v := showGroup(t, srv); v.Total.Lag != c.lag || v.Total.Backlog != c.lag {
			t.Errorf("group reset --to %s (%s): lag %d, backlog %d, want %d", c.to, c.what, v.Total.Lag, v.Total.Backlog, c.lag)
		}
	}

	if out, err := runCLI(append(s, "consumer-group", "show", "--subject", "orders", "--group", "nobody")...); err == nil || !strings.Contains(err.Error(), "consumer group not known") {
		t.Errorf("group show of an unknown group: %v\n%s", err, out)
	}
}

// TestConsumerGroupCommandsOnAStandaloneBroker: a broker without a
// metaserver answers the consumer-group commands as the subject's only
// broker group.
func TestConsumerGroupCommandsOnAStandaloneBroker(t *testing.T) {
	addr := testcluster.Broker(t, nil).ClientAddr()
	mustRun(t, "--server", addr, "consumer-group", "set", "--subject", "orders", "--group", "billing", "--max-deliveries", "3")
	var views []admin.ConsumerGroupView
	runJSON(t, &views, "--server", addr, "consumer-group", "list")
	if len(views) != 1 || views[0].Subject != "orders" || views[0].Group != "billing" ||
		len(views[0].BrokerGroups) != 1 || views[0].Total.Settings.MaxDeliveries != 3 {
		t.Fatalf("group list of a standalone broker: %+v", views)
	}
	var pages []admin.DeadLetterPage
	runJSON(t, &pages, "--server", addr, "deadletter", "list", "--subject", "orders", "--group", "billing")
	if len(pages) != 1 || pages[0].BrokerGroup != "g1" || pages[0].Total != 0 {
		t.Fatalf("deadletter list of a standalone broker: %+v", pages)
	}
}
