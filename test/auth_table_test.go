package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// TestAuthTableThroughQmqctl checks (application, operation, subject)
// cases through qmqctl, on a metaserver and a three-node broker group of
// processes with TLS and --auth: each is served, or refused with the code
// it must be, and a refused one leaves every node's Raft log where it
// was (nothing proposed anywhere). The same cases through the SDK are
// server's TestAuthTable.
func TestAuthTableThroughQmqctl(t *testing.T) {
	sec := NewSecurity(t).UseAuth()
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	meta.UseTLS(sec)
	meta.Form("", "m1")
	g1 := NewCluster(t, "g1", "--meta", meta.ClientAddrs(), "--election-timeout", "500ms")
	g1.UseTLS(sec)
	g1.Form(meta.ClientAddrs(), "a", "b", "c")

	adm, err := admin.New(meta.ClientAddrs(), sec.OperatorConnOption())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	dir := t.TempDir()
	for _, spec := range []admin.AppSpec{
		{Code: "ops", Admin: true},
		{Code: "billing", Send: []string{"orders.*"}, Consume: []admin.ConsumeGrant{{Subject: "orders.*", ConsumerGroup: "billing"}}},
		{Code: "reader"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		secret, err := adm.CreateApp(ctx, spec)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, spec.Code), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	servers := meta.ClientAddrs() + "," + g1.ClientAddrs()
	// qmqctl as app ("" for none), with the client certificate.
	ctl := func(app string, args ...string) (string, error) {
		flags := []string{"--server", servers, "--tls-ca", sec.Client.CA, "--tls-cert", sec.Client.Cert, "--tls-key", sec.Client.Key}
		if app != "" {
			flags = append(flags, "--app", app, "--secret-file", filepath.Join(dir, app))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, g1.qmqctl, append(flags, args...)...).CombinedOutput()
		return string(out), err
	}
	// Every node's Raft last index, once each has applied all of it.
	indexes := func() string {
		var s string
		g1.WaitFor(30*time.Second, "every node to apply its Raft log", func() error {
			var lines []string
			for _, c := range []*Cluster{meta, g1} {
				sts, err := c.Statuses()
				if err != nil {
					return err
				}
				for id, st := range sts {
					if st.AppliedIndex != st.LastIndex {
						return fmt.Errorf("%s applied %d of %d", id, st.AppliedIndex, st.LastIndex)
					}
					lines = append(lines, fmt.Sprintf("%s/%s %d", c.Group, id, st.LastIndex))
				}
			}
			sort.Strings(lines)
			s = strings.Join(lines, ", ")
			return nil
		})
		return s
	}
	// The allowed consume comes last: its consumer's session, expiring
	// later, would propose a reclaim.
	for _, c := range []struct {
		app  string
		args []string
		says string // "" if served
	}{
		{"billing", []string{"send", "--subject", "orders.paid", "one"}, ""},
		{"billing", []string{"send", "--subject", "payments", "two"}, "PERMISSION_DENIED: application billing may neither send to nor consume subject payments"},
		{"billing", []string{"consume", "--subject", "orders.paid", "--group", "audit", "--count", "1", "--timeout", "2s"}, "PERMISSION_DENIED: application billing may not consume subject orders.paid as consumer group audit"},
		{"billing", []string{"app", "list"}, "PERMISSION_DENIED: application billing is not an admin"},
		{"billing", []string{"consumer-group", "reset", "--yes", "--subject", "orders.paid", "--group", "audit", "--to", "earliest"}, "PERMISSION_DENIED: application billing may not consume"},
		{"billing", []string{"subject", "assign", "--count", "2", "orders.paid"}, "PERMISSION_DENIED: application billing is not an admin"},
		{"billing", []string{"status"}, ""},
		{"reader", []string{"send", "--subject", "orders.paid", "three"}, "PERMISSION_DENIED: application reader may neither send to nor consume"},
		{"", []string{"status"}, "UNAUTHENTICATED"},
		{"", []string{"send", "--subject", "orders.paid", "four"}, "UNAUTHENTICATED"},
		{"ops", []string{"send", "--subject", "payments", "five"}, ""},
		{"ops", []string{"app", "list"}, ""},
		{"billing", []string{"backup", "--broker-group", "g1", "--out", filepath.Join(dir, "g1.qmqbackup")}, "PERMISSION_DENIED: application billing is not an admin"},
		{"reader", []string{"backup", "--meta", "--out", filepath.Join(dir, "meta.qmqbackup")}, "PERMISSION_DENIED: application reader is not an admin"},
		{"ops", []string{"backup", "--broker-group", "g1", "--out", filepath.Join(dir, "g1.qmqbackup")}, ""},
		{"ops", []string{"backup", "--meta", "--out", filepath.Join(dir, "meta.qmqbackup")}, ""},
		{"billing", []string{"consume", "--subject", "orders.paid", "--group", "billing", "--start", "earliest", "--count", "1", "--timeout", "10s"}, ""},
	} {
		what := fmt.Sprintf("qmqctl as %q: %s", c.app, strings.Join(c.args, " "))
		before := ""
		if c.says != "" {
			before = indexes()
		}
		out, err := ctl(c.app, c.args...)
		if c.says == "" {
			if err != nil {
				t.Fatalf("%s: %v\n%s", what, err, out)
			}
			continue
		}
		if err == nil || !strings.Contains(out, c.says) {
			t.Fatalf("%s: %v, want a refusal saying %q:\n%s", what, err, c.says, out)
		}
		if after := indexes(); after != before {
			t.Fatalf("%s changed the Raft logs: %s, then %s", what, before, after)
		}
	}
}
