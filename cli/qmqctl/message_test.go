package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

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
		{"message", "show"},
		{"message", "show", "--body", "raw", "x"},
	} {
		if _, stderr, status := runCLIStatus(append([]string{"--server", server}, bad...)...); status != 2 {
			t.Errorf("%v: status %d (want 2, a usage error), stderr %q", bad, status, stderr)
		}
	}
}
