package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// leave refuses a node that is not a member of the group's configuration,
// naming the members, and changes nothing; a broker group or the
// metaserver group alike, and an unknown broker group.
func TestLeaveOfANonMember(t *testing.T) {
	srv := startCluster(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"leave", "--yes", "--broker-group", "g1", "--id", "nobody"}, "qmqctl: node nobody is not a member of broker group g1 (its members: g1-n1): nothing was done"},
		{[]string{"leave", "--yes", "--group", "g1", "--id", "g2-n1"}, "qmqctl: node g2-n1 is not a member of broker group g1 (its members: g1-n1): nothing was done"},
		{[]string{"leave", "--yes", "--broker-group", "meta", "--id", "g1-n1"}, "is not a member of the metaserver group (its members: "},
		{[]string{"leave", "--yes", "--broker-group", "g9", "--id", "x"}, "qmqctl: no broker group g9 (the broker groups: g1, g2)"},
	} {
		_, stderr, status := runCLIStatus(append([]string{"--server", srv}, c.args...)...)
		if status != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("qmqctl %s: exit status %d, stderr %q; want 1 and %q", strings.Join(c.args, " "), status, stderr, c.want)
		}
	}
	var st struct {
		Groups []struct {
			Name  string `json:"name"`
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		} `json:"groups"`
	}
	runJSON(t, &st, "--server", srv, "status")
	if len(st.Groups) != 2 || len(st.Groups[0].Nodes) != 1 || len(st.Groups[1].Nodes) != 1 {
		t.Fatalf("the groups after the refusals: %+v", st.Groups)
	}
}

// status shows a node it cannot reach as DOWN (and still the rest), and
// status --check exits 1 when a node is DOWN or a group has no leader,
// saying which on stderr; 0 while every node answers.
func TestStatusDownAndCheck(t *testing.T) {
	m := testcluster.Meta(t, nil)
	var nodes []*server.Node
	for _, g := range []string{"g1", "g2"} {
		nodes = append(nodes, testcluster.Broker(t, testcluster.Registered(g, m.ClientAddr())))
	}
	srv := m.ClientAddr()
	poll.Until(t, 20*time.Second, "both broker groups to be reported", func() bool {
		out, _, status := runCLIStatus("--server", srv, "status", "--check")
		return status == 0 && strings.Contains(out, "g1-n1") && strings.Contains(out, "g2-n1")
	})
	out, stderr, status := runCLIStatus("--server", srv, "status", "--check")
	if status != 0 || stderr != "" || !strings.Contains(out, "2 broker groups, 0 subjects") || !strings.Contains(out, "METASERVER") ||
		!strings.Contains(out, "BROKER-GROUP") || strings.Contains(out, "DOWN") {
		t.Fatalf("status --check of a healthy cluster: exit status %d, stderr %q:\n%s", status, stderr, out)
	}
	nodes[1].Close()
	out, stderr, status = runCLIStatus("--server", srv, "status")
	if status != 0 || !strings.Contains(out, "DOWN: node g2-n1 of broker group g2") || !strings.Contains(out, "NO LEADER: broker group g2 has no leader") ||
		!strings.Contains(out, "g1-n1") {
		t.Fatalf("status with g2's node stopped: exit status %d, stderr %q:\n%s", status, stderr, out)
	}
	if line := lineWith(out, "g2-n1"); !strings.Contains(line, " DOWN ") {
		t.Errorf("g2-n1's row does not say DOWN: %q", line)
	}
	out, stderr, status = runCLIStatus("--server", srv, "status", "--check")
	if status != 1 || !strings.HasPrefix(stderr, "qmqctl status: 2 problems: DOWN: node g2-n1 of broker group g2") || !strings.Contains(out, "g1-n1") {
		t.Fatalf("status --check with g2's node stopped: exit status %d, stderr %q:\n%s", status, stderr, out)
	}
	var st struct {
		Problems []string `json:"problems"`
		Groups   []struct {
			Name  string `json:"name"`
			Nodes []struct {
				State string `json:"state"`
			} `json:"nodes"`
		} `json:"groups"`
	}
	b, _, status := runCLIStatus("--server", srv, "status", "--check", "--json")
	if err := json.Unmarshal([]byte(b), &st); err != nil || status != 1 || len(st.Problems) != 2 || st.Groups[1].Nodes[0].State != "DOWN" {
		t.Fatalf("status --check --json: exit status %d, %v: %+v", status, err, st)
	}
}

func lineWith(out, s string) string {
	for line := range strings.Lines(out) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
