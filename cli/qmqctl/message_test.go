package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// message show, list and browse read what send stored, in every broker
// group, without consuming it; a missing id exits 1 and says so.
func TestMessageShowListBrowse(t *testing.T) {
	server := startCluster(t)
	send := func(args ...string) []string {
		t.Helper()
		out, err := runCLI(append([]string{"--server", server, "send", "--subject", "orders"}, args...)...)
		if err != nil {
			t.Fatalf("send %v: %v\n%s", args, err, out)
		}
		return strings.Fields(out)
	}
	plain := send("--count", "6", "--tag", "blue", "hello")
	keyed := send("--key", "order-42", "--property", "region=eu", "keyed body")
	if len(plain) != 6 || len(keyed) != 1 {
		t.Fatalf("sent %v and %v", plain, keyed)
	}

	out, err := runCLI("--server", server, "message", "show", keyed[0])
	if err != nil {
		t.Fatalf("message show: %v\n%s", err, out)
	}
	for _, want := range []string{"message " + keyed[0] + " of orders", "key         order-42", "property    region=eu", "body        keyed body", "sequence "} {
		if !strings.Contains(out, want) {
			t.Errorf("message show does not say %q:\n%s", want, out)
		}
	}
	stdout, stderr, status := runCLIStatus("--server", server, "message", "show", "no-such-id")
	if status != 1 || !strings.Contains(stderr, "no retained message has this id") {
		t.Errorf("message show of a missing id: status %d, stdout %q, stderr %q", status, stdout, stderr)
	}

	list := func(args ...string) []admin.MessagePage {
		t.Helper()
		out, err := runCLI(append([]string{"--server", server, "message", "list", "--subject", "orders", "--since", "1h", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("message list %v: %v\n%s", args, err, out)
		}
		var pages []admin.MessagePage
		if err := json.Unmarshal([]byte(out), &pages); err != nil {
			t.Fatalf("message list %v: %v\n%s", args, err, out)
		}
		return pages
	}
	ids := func(pages []admin.MessagePage) map[string]bool {
		m := map[string]bool{}
		for _, p := range pages {
			for _, msg := range p.Messages {
				m[msg.ID] = true
			}
		}
		return m
	}
	if got := ids(list()); len(got) != 7 {
		t.Errorf("message list: %d messages, want 7: %v", len(got), got)
	}
	if got := ids(list("--key", "order-42")); len(got) != 1 || !got[keyed[0]] {
		t.Errorf("message list --key: %v, want only %s", got, keyed[0])
	}
	if got := ids(list("--property", "region=eu")); len(got) != 1 || !got[keyed[0]] {
		t.Errorf("message list --property region=eu: %v, want only %s", got, keyed[0])
	}
	if got := ids(list("--property", "region=us")); len(got) != 0 {
		t.Errorf("message list --property region=us: %v, want none", got)
	}
	if got := ids(list("--tag", "blue")); len(got) != 6 || got[keyed[0]] {
		t.Errorf("message list --tag blue: %v, want the 6 tagged", got)
	}
	if got := ids(list("--since", "1s", "--until", "0s", "--tag", "red")); len(got) != 0 {
		t.Errorf("message list --tag red: %v, want none", got)
	}

	// Browse one broker group a message at a time, following its Next.
	pages := list()
	var group string
	want := 0
	for _, p := range pages {
		if len(p.Messages) > want {
			group, want = p.BrokerGroup, len(p.Messages)
		}
	}
	seen, from := 0, "0"
	for range want + 1 {
		out, err := runCLI("--server", server, "message", "browse", "--subject", "orders", "--broker-group", group, "--from-seq", from, "--limit", "1", "--json")
		if err != nil {
			t.Fatalf("message browse: %v\n%s", err, out)
		}
		var bp []admin.MessagePage
		if err := json.Unmarshal([]byte(out), &bp); err != nil || len(bp) != 1 {
			t.Fatalf("message browse: %v %v\n%s", bp, err, out)
		}
		seen += len(bp[0].Messages)
		for _, m := range bp[0].Messages {
			if len(m.Body) == 0 {
				t.Errorf("browse answered message %s without its body", m.ID)
			}
		}
		if bp[0].Next < 0 {
			break
		}
		from = strconv.FormatInt(bp[0].Next, 10)
	}
	if seen != want {
		t.Errorf("browsing %s a message at a time saw %d, the listing %d", group, seen, want)
	}

	// Nothing was consumed: no consumer group appeared.
	out, err = runCLI("--server", server, "consumer-group", "list", "--subject", "orders", "--json")
	if err != nil {
		t.Fatalf("consumer-group list: %v\n%s", err, out)
	}
	if strings.Contains(out, `"group"`) {
		t.Errorf("reading messages created a consumer group: %s", out)
	}

	for _, bad := range [][]string{
		{"message", "list", "--subject", "orders", "--since", "yesterday"},
		{"message", "list", "--subject", "orders", "--since", "1h", "--limit", "1001"},
		{"message", "list", "--subject", "orders", "--since", "1h", "--budget", "1000001"},
		{"message", "browse", "--subject", "orders", "--from-seq", "0", "--since", "1h"},
		{"message", "list", "--subject", "orders", "--since", "1h", "--property", "region"},
		{"message", "list", "--subject", "orders", "--since", "1h", "--property", "=eu"},
		{"message", "show"},
		{"message", "show", "--body", "raw", "x"},
	} {
		if _, stderr, status := runCLIStatus(append([]string{"--server", server}, bad...)...); status != 2 {
			t.Errorf("%v: status %d (want 2, a usage error), stderr %q", bad, status, stderr)
		}
	}

	// Consumed: the keyed message's timeline under it says it was sent,
	// handed out to billing and acked by billing, in that order.
	if out, err := runCLI("--server", server, "consume", "--subject", "orders", "--group", "billing", "--start", "earliest",
		"--consumer", "c1", "--count", "7"); err != nil {
		t.Fatalf("consume: %v\n%s", err, out)
	}
	if out, err = runCLI("--server", server, "message", "show", keyed[0]); err != nil {
		t.Fatalf("message show: %v\n%s", err, out)
	}
	rows := timelineRows(t, out)
	var kinds []string
	for _, f := range rows {
		kinds = append(kinds, f[1])
		if (f[1] == "handed-out" || f[1] == "acked") && (len(f) < 4 || f[2] != "billing" || f[3] != "c1") {
			t.Errorf("timeline row %q does not name group billing and consumer c1", f)
		}
	}
	if strings.Join(kinds, ",") != "sent,handed-out,acked" {
		t.Errorf("timeline events %v, want sent, handed-out, acked:\n%s", kinds, out)
	}
	if out, err = runCLI("--server", server, "message", "show", keyed[0], "--json"); err != nil {
		t.Fatalf("message show --json: %v\n%s", err, out)
	}
	var found []admin.StoredMessage
	if err := json.Unmarshal([]byte(out), &found); err != nil || len(found) != 1 || len(found[0].Timeline) != 3 || found[0].Timeline[2].Kind != "acked" {
		t.Errorf("message show --json: %+v, %v; want the timeline ending acked", found, err)
	}
	if out, err = runCLI("--server", server, "message", "show", keyed[0], "--no-timeline"); err != nil || strings.Contains(out, "timeline") {
		t.Errorf("message show --no-timeline: %v\n%s", err, out)
	}
}

// timelineRows is the timeline table message show printed under a
// message, each row's fields.
func timelineRows(t *testing.T, out string) [][]string {
	t.Helper()
	_, timeline, ok := strings.Cut(out, "\n  timeline\n")
	lines := strings.Split(strings.TrimRight(timeline, "\n"), "\n")
	if !ok || len(strings.Fields(lines[0])) != 7 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "TIME  ") {
		t.Fatalf("message show prints no timeline table:\n%s", out)
	}
	var rows [][]string
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasPrefix(line, "    ") {
			t.Fatalf("timeline row %q:\n%s", line, out)
		}
		rows = append(rows, f)
	}
	return rows
}

// The timeline table: a row an event, oldest first, with its group,
// consumer, delivery, Raft index and what else it says; a timeline cut
// short says so; an empty one says there is none.
func TestMessageTimelineTable(t *testing.T) {
	at := time.Date(2026, 1, 31, 9, 0, 0, 0, time.UTC)
	m := admin.StoredMessage{ID: "m1", Subject: "orders", Timeline: []admin.Event{
		{Kind: "sent", At: at, RaftIndex: 7, App: "billing", ClientAddress: "127.0.0.1:5000", Due: at.Add(time.Hour)},
		{Kind: "handed-out", At: at.Add(time.Hour), RaftIndex: 9, ConsumerGroup: "billing", Consumer: "c1", Delivery: 1},
		{Kind: "nacked", At: at.Add(time.Hour), RaftIndex: 10, ConsumerGroup: "billing", Consumer: "c1", Due: at.Add(2 * time.Hour)},
	}, TimelineMore: true}
	var b strings.Builder
	printMessage(&b, &m, "text")
	if err := printTimeline(&b, &m); err != nil {
		t.Fatal(err)
	}
	rows := timelineRows(t, b.String())
	want := [][]string{
		{"2026-01-31T09:00:00Z", "sent", "7", "app", "billing,", "from", "127.0.0.1:5000,", "deliver", "at", "2026-01-31T10:00:00Z"},
		{"2026-01-31T10:00:00Z", "handed-out", "billing", "c1", "1", "9"},
		{"2026-01-31T10:00:00Z", "nacked", "billing", "c1", "10", "retry", "at", "2026-01-31T11:00:00Z"},
		{"…", "more", "events", "after", "these", "(a", "lookup", "answers", "at", "most", "1000,", "and", "fewer", "when", "its", "reply", "is", "full)"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("timeline rows:\n%v\nwant\n%v\n%s", rows, want, b.String())
	}
	b.Reset()
	m.Timeline, m.TimelineMore = nil, false
	if err := printTimeline(&b, &m); err != nil || b.String() != "  timeline    no events recorded\n" {
		t.Errorf("an empty timeline: %q, %v", b.String(), err)
	}
}
