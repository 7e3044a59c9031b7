package main

import (
	"strings"
	"testing"

	"github.com/qmqgo/qmq/admin"
)

// `group` still runs what it ran, saying on stderr which new command it
// is; its help names both. The old flag spellings work: --group for a
// broker group (join, leave, config, transfer-leader), --groups for
// subject assign.
func TestOldNames(t *testing.T) {
	srv := startCluster(t)
	s := []string{"--server", srv}
	out, stderr, status := runCLIStatus(append(s, "group", "set", "--subject", "orders", "--group", "billing", "--max-deliveries", "3")...)
	if status != 0 || strings.Count(out, "(created)") != 2 || stderr != "qmqctl: note: \"group set\" is now \"consumer-group set\" (group is its old name)\n" {
		t.Fatalf("group set: exit status %d, stdout %q, stderr %q", status, out, stderr)
	}
	oldList, stderr, _ := runCLIStatus(append(s, "group", "list", "--subject", "orders")...)
	newList, newStderr, _ := runCLIStatus(append(s, "consumer-group", "list", "--subject", "orders")...)
	if oldList != newList || !strings.Contains(newList, "CONSUMER-GROUP") || !strings.Contains(stderr, `"consumer-group list"`) || newStderr != "" {
		t.Errorf("group list printed %q (stderr %q), consumer-group list %q (stderr %q)", oldList, stderr, newList, newStderr)
	}
	if _, stderr, status := runCLIStatus(append(s, "group", "readonly", "g2")...); status != 0 || !strings.Contains(stderr, `"broker-group readonly"`) {
		t.Errorf("group readonly: exit status %d, stderr %q", status, stderr)
	}
	mustRun(t, append(s, "broker-group", "writable", "g2")...)
	help := mustRun(t, "group", "--help")
	for _, w := range []string{"old name", "qmqctl consumer-group", "qmqctl broker-group"} {
		if !strings.Contains(help, w) {
			t.Errorf("group --help does not say %q:\n%s", w, help)
		}
	}
	if top := mustRun(t, "--help"); !strings.Contains(top, "consumer-group") || !strings.Contains(top, "broker-group") || strings.Contains(top, "   group ") {
		t.Errorf("qmqctl --help lists:\n%s", top)
	}
	for _, flag := range []string{"--group", "--broker-group"} {
		var configs []admin.BrokerGroupConfig
		runJSON(t, &configs, append(s, "config", "show", flag, "g2")...)
		if len(configs) != 1 || configs[0].BrokerGroup != "g2" {
			t.Errorf("config show %s g2: %+v", flag, configs)
		}
	}
	for _, flag := range []string{"--groups", "--broker-groups"} {
		if out := mustRun(t, append(s, "subject", "assign", flag, "g1", "orders")...); !strings.Contains(out, "broker group g1 (writable)") {
			t.Errorf("subject assign %s: %q", flag, out)
		}
	}
}
