package test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestDelaysThroughTheCommandLine runs a three-node group as processes:
// qmqctl send --delay and --at schedule messages, refuse what is too far
// ahead or not a time, and send a past time at once; qmqctl delay stats
// shows what is pending; every node is SIGKILLed while the messages are
// pending and restarted; qmqctl consume then gets each message once,
// none before its delivery time.
func TestDelaysThroughTheCommandLine(t *testing.T) {
	c := NewCluster(t, "g1", "--election-timeout", "500ms")
	c.Form("", "n1", "n2", "n3")
	ctl := func(args ...string) (string, error) {
		return c.Ctl(append([]string{"--server", c.ClientAddrs()}, args...)...)
	}
	start := time.Now()
	out, err := ctl("send", "--subject", "reminders", "--delay", "6s", "--count", "20", "later")
	if err != nil {
		t.Fatal(err)
	}
	delayed := strings.Fields(out)
	at := time.Now().Add(7 * time.Second).UTC().Truncate(time.Second)
	out, err = ctl("send", "--subject", "reminders", "--at", at.Format(time.RFC3339), "at")
	if err != nil {
		t.Fatal(err)
	}
	atID := strings.TrimSpace(out)
	out, err = ctl("send", "--subject", "reminders", "--at", "2001-01-01T00:00:00Z", "past")
	if err != nil {
		t.Fatal(err)
	}
	pastID := strings.TrimSpace(out)
	if len(delayed) != 20 || atID == "" || pastID == "" {
		t.Fatalf("send printed %d delayed ids, %q and %q", len(delayed), atID, pastID)
	}
	for _, bad := range [][]string{
		{"--delay", "17600h"},                              // past two years
		{"--at", "tomorrow"},                               // not a time
		{"--delay", "1s", "--at", at.Format(time.RFC3339)}, // both
	} {
		out, err := ctl(append([]string{"send", "--subject", "reminders"}, bad...)...)
		if err == nil {
			t.Errorf("send %v succeeded: %s", bad, out)
		} else if !strings.Contains(out, "maximum delay") && !strings.Contains(out, "RFC 3339") && !strings.Contains(out, "not both") {
			t.Errorf("send %v failed without saying why: %s", bad, out)
		}
	}

	out, err = ctl("delay", "stats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "reminders") || !strings.Contains(out, "21") || !strings.Contains(out, at.Truncate(time.Hour).Format("2006-01-02T15")) {
		t.Fatalf("delay stats does not show 21 pending for reminders in the hour of %s:\n%s", at, out)
	}

	// Crash every node while the messages are pending, then restart them.
	for _, n := range c.Nodes() {
		n.Kill()
	}
	if time.Since(start) > 6*time.Second {
		t.Fatal("the messages fell due before the crash: the test did not exercise it")
	}
	for _, n := range c.Nodes() {
		n.Restart()
	}
	out, err = ctl("consume", "--subject", "reminders", "--group", "g", "--start", "earliest", "--count", "22", "--timeout", "20s")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct {
			ID        string     `json:"id"`
			DeliverAt *time.Time `json:"deliver_at"`
			Body      string     `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("consume printed %q: %v", line, err)
		}
		seen[m.ID]++
		switch {
		case m.ID == pastID && m.DeliverAt != nil:
			t.Errorf("the past-time message arrived as delayed (%s)", m.DeliverAt)
		case m.ID == atID && (m.DeliverAt == nil || !m.DeliverAt.Equal(at)):
			t.Errorf("the --at message arrived with delivery time %v, want %s", m.DeliverAt, at)
		case m.Body == "later" && (m.DeliverAt == nil || m.DeliverAt.Before(start.Add(6*time.Second).Truncate(time.Millisecond))):
			t.Errorf("a --delay 6s message arrived with delivery time %v", m.DeliverAt)
		}
	}
	if time.Now().Before(at) {
		t.Errorf("consume finished at %s, before the last message was due at %s", time.Now(), at)
	}
	for _, id := range append(delayed, atID, pastID) {
		if seen[id] != 1 {
			t.Errorf("%s consumed %d times, want once", id, seen[id])
		}
	}
	if len(seen) != 22 {
		t.Errorf("consumed %d distinct messages, want 22: %v", len(seen), fmt.Sprint(seen))
	}
}
