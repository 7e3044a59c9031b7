package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/testcluster"
)

// secretIn returns the secret printed on a line of its own.
func secretIn(t *testing.T, out string) string {
	t.Helper()
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "qmqs_") {
			return line
		}
	}
	t.Fatalf("no secret printed:\n%s", out)
	return ""
}

// TestAppCommands creates, lists, updates, rotates and deletes an
// application against a metaserver.
func TestAppCommands(t *testing.T) {
	m := testcluster.Meta(t, nil)
	s := []string{"--server", m.ClientAddr()}
	run := func(args ...string) string { return mustRun(t, append(s, args...)...) }
	list := func() []admin.AppInfo {
		var apps []admin.AppInfo
		runJSON(t, &apps, append(s, "app", "list")...)
		return apps
	}

	// Options after the code, before it, or both.
	out := run("app", "create", "billing", "--send", "orders.*", "--send", "invoices", "--consume", "payments.*/billing-*", "--max-subjects", "5")
	secret := secretIn(t, out)
	for _, w := range []string{"Application billing created", "shown this once", "--app billing --secret-file", "QMQ_APP"} {
		if !strings.Contains(out, w) {
			t.Errorf("app create does not say %q:\n%s", w, out)
		}
	}
	other := secretIn(t, run("app", "create", "--admin", "ops"))
	if other == secret {
		t.Fatal("two applications have one secret")
	}
	apps := list()
	if len(apps) != 2 || apps[0].Code != "billing" || apps[1].Code != "ops" || !apps[1].Admin {
		t.Fatalf("app list: %+v", apps)
	}
	b := apps[0]
	if strings.Join(b.Send, ",") != "orders.*,invoices" || len(b.Consume) != 1 || b.Consume[0] != (admin.ConsumeGrant{Subject: "payments.*", ConsumerGroup: "billing-*"}) ||
		b.MaxSubjects != 5 || b.MaxConsumerGroups != 1000 || b.Secrets != 1 || b.Admin {
		t.Fatalf("billing as listed: %+v", b)
	}
	out = run("app", "list")
	for _, w := range []string{"CODE", "billing", "orders.*,invoices", "payments.*/billing-*", "0/5", "0/1000", "ops", "yes", "2 applications"} {
		if !strings.Contains(out, w) {
			t.Errorf("app list does not say %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Fatal("app list prints a secret")
	}

	// Refusals.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"app", "create", "billing"}, "application billing exists"},
		{[]string{"app", "create", "x", "--consume", "payments"}, "SUBJECT/GROUP"},
		{[]string{"app", "create", "x", "--consume", "a/b/c"}, "SUBJECT/GROUP"},
		{[]string{"app", "create", "x", "--send", "*orders"}, "pattern"},
		{[]string{"app", "create"}, "one argument"},
		{[]string{"app", "create", "x", "y"}, "one argument"},
		{[]string{"app", "update", "nobody"}, "no application nobody"},
		{[]string{"app", "rotate", "billing", "--grace", "721h"}, "grace"},
	} {
		if out, err := runCLI(append(s, c.args...)...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("qmqctl %s: %v, want an error saying %q\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}

	// An update replaces the rights.
	if out := run("app", "update", "billing", "--consume", "refunds/billing"); !strings.Contains(out, "application billing updated") {
		t.Fatalf("app update:\n%s", out)
	}
	if b := list()[0]; len(b.Send) != 0 || len(b.Consume) != 1 || b.Consume[0].Subject != "refunds" || b.MaxSubjects != 1000 {
		t.Fatalf("billing after the update: %+v", b)
	}

	// A rotation: by default the old secret works for an hour.
	before := time.Now()
	out = run("app", "rotate", "billing")
	if secret2 := secretIn(t, out); secret2 == secret || !strings.Contains(out, "The old secret works until") {
		t.Fatalf("app rotate:\n%s", out)
	}
	b = list()[0]
	if b.Secrets != 2 || b.OldSecretExpires.Before(before.Add(time.Hour-time.Second)) || b.OldSecretExpires.After(time.Now().Add(time.Hour)) {
		t.Fatalf("billing after a rotation: %+v", b)
	}
	if out := run("app", "list"); !strings.Contains(out, "2 (old one until") {
		t.Errorf("app list after a rotation:\n%s", out)
	}
	// --secret-out writes the secret to a new file of mode 0600, prints
	// it nowhere, and never overwrites a file.
	file := filepath.Join(t.TempDir(), "billing.secret")
	out = run("app", "rotate", "billing", "--secret-out", file)
	written, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(written)); !strings.HasPrefix(s, "qmqs_") || strings.Contains(out, s) || !strings.Contains(out, "is in "+file) {
		t.Fatalf("app rotate --secret-out wrote %q and printed:\n%s", written, out)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the secret file has mode %v", fi.Mode().Perm())
	}
	out, err = runCLI(append(s, "app", "rotate", "billing", "--secret-out", file)...)
	if err == nil || !strings.Contains(out, "qmqs_") {
		t.Fatalf("a rotation whose --secret-out exists: %v; it must fail and print the secret rather than lose it:\n%s", err, out)
	}
	if again, _ := os.ReadFile(file); string(again) != string(written) {
		t.Fatal("an existing secret file was overwritten")
	}

	out = run("app", "rotate", "--grace", "0s", "billing")
	if !strings.Contains(out, "The old secret no longer works") || list()[0].Secrets != 1 {
		t.Fatalf("app rotate --grace 0s:\n%s", out)
	}

	// Deletion, twice.
	for range 2 {
		if out := run("app", "delete", "--yes", "billing"); !strings.Contains(out, "application billing deleted") {
			t.Fatalf("app delete:\n%s", out)
		}
	}
	if apps := list(); len(apps) != 1 || apps[0].Code != "ops" {
		t.Fatalf("app list after the deletion: %+v", apps)
	}
	out = run("app", "create", "--help")
	for _, w := range []string{`"orders.*" every name starting with "orders."`, `"*" every`, "--admin lets it do everything", "'/' separates them"} {
		if !strings.Contains(out, w) {
			t.Errorf("app create --help does not say %q:\n%s", w, out)
		}
	}
}
