package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// TestUpgradeStatusAndFinalize: upgrade status shows each group's (the
// metaserver's too) active version and what each node supports; finalize of a group whose
// node supports no newer version is refused, naming the node; one already
// at the newest says so; bad flags are usage errors.
func TestUpgradeStatusAndFinalize(t *testing.T) {
	m := testcluster.Meta(t, nil)
	testcluster.Broker(t, testcluster.Registered("g1", m.ClientAddr()))
	// g2's one node stands for a build of the release before version
	// gates: it supports V1 alone, so its group stays there.
	testcluster.Broker(t, func(c *server.Config) {
		testcluster.Registered("g2", m.ClientAddr())(c)
		c.FSM.MaxVersion = version.V1
	})
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	poll.Until(t, 20*time.Second, "both broker groups registered with a leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := a.Cluster(ctx)
		if err != nil || len(c.BrokerGroups) != 2 {
			return false
		}
		for _, g := range c.BrokerGroups {
			if g.Leader == "" || len(g.Nodes) != 1 || g.Nodes[0].ClientAddr == "" {
				return false
			}
		}
		return true
	})

	out, err := runCLI("--server", m.ClientAddr(), "upgrade", "status")
	if err != nil {
		t.Fatalf("upgrade status: %v: %s", err, out)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 5 {
			rows[f[0]] = strings.Join(f, " ")
		}
	}
	for group, want := range map[string]string{"g1": "g1 2 g1-n1 (leader) 1-2", "g2": "g2 1 g2-n1 (leader) 1-1", "meta": "meta 2 m1 (leader) 1-2"} {
		if rows[group] != want {
			t.Errorf("upgrade status: %s's row is %q, want %q:\n%s", group, rows[group], want, out)
		}
	}
	if strings.Contains(out, "raise g1") || strings.Contains(out, "raise g2") {
		t.Errorf("upgrade status offers to raise a broker group already at the newest its node supports:\n%s", out)
	}

	_, err = runCLI("--server", m.ClientAddr(), "upgrade", "finalize", "--broker-group", "g2")
	if err == nil || !strings.Contains(err.Error(), "node g2-n1 supports versions 1-1; upgrade it first") {
		t.Errorf("finalize of g2: %v; want a refusal naming g2-n1", err)
	}
	out, err = runCLI("--server", m.ClientAddr(), "upgrade", "finalize", "--broker-group", "g1")
	if err != nil || !strings.Contains(out, "broker group g1: already at version 2") {
		t.Errorf("finalize of g1: %v: %s; want already at version 2", err, out)
	}
	// --all: every broker group, then the metaserver group; g2's refusal
	// does not stop the others.
	out, err = runCLI("--server", m.ClientAddr(), "upgrade", "finalize", "--all")
	if err == nil || !strings.Contains(err.Error(), "broker group g2: ") || !strings.Contains(out, "broker group g1: already at version 2") ||
		!strings.Contains(out, "the metaserver group: already at version 2") {
		t.Errorf("finalize --all: %v: %s; want g1 and the metaserver group at 2, g2 refused", err, out)
	}
	for _, args := range [][]string{{"upgrade", "finalize"}, {"upgrade", "finalize", "--all", "--broker-group", "g1"}, {"upgrade", "finalize", "--all", "--to", "9"}, {"upgrade", "finalize", "--all", "--to", "0"}} {
		if _, _, status := runCLIStatus(append([]string{"--server", m.ClientAddr()}, args...)...); status != 2 {
			t.Errorf("qmqctl %v: exit %d, want 2 (a usage mistake)", args, status)
		}
	}
}
