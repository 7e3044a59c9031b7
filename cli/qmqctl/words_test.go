package main

import (
	"strings"
	"testing"

	"github.com/qmqgo/qmq/test/testcluster"
)

// Counts agree with their nouns: "1 broker group", "2 messages".
func TestPlurals(t *testing.T) {
	for _, c := range []struct {
		n    int
		want string
	}{{0, "0 messages"}, {1, "1 message"}, {2, "2 messages"}} {
		if got := plural(c.n, "message"); got != c.want {
			t.Errorf("plural(%d) = %q, want %q", c.n, got, c.want)
		}
	}
	addr := testcluster.Broker(t, nil).ClientAddr()
	if out := mustRun(t, "--server", addr, "status"); !strings.Contains(out, "1 broker group, 0 subjects\n") {
		t.Errorf("status of one broker group:\n%s", out)
	}
}
