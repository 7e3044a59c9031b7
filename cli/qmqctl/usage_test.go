package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/test/testcluster"
)

// A usage mistake is one line on stderr that names it as typed, with a
// "did you mean" for a flag or command near one that exists, exit status
// 2, nothing on stdout (no help dumped), and nothing sent (nothing listens
// at the server address). The help itself still prints, and exits 0.
func TestUsageErrors(t *testing.T) {
	dead := testcluster.Addr(t)
	for _, c := range []struct {
		args []string
		want string // the whole of stderr
	}{
		{[]string{"send", "--subjet", "x", "hi"}, "qmqctl send: unknown flag --subjet (did you mean --subject?)"},
		{[]string{"send", "-subjet=x", "hi"}, "qmqctl send: unknown flag -subjet (did you mean --subject?)"},
		{[]string{"sendd", "--subject", "x"}, "qmqctl: unknown command sendd (did you mean send?)"},
		{[]string{"consumer-group", "lst"}, "qmqctl consumer-group: unknown command lst (did you mean list?)"},
		{[]string{"broker-group", "read-only", "g1"}, "qmqctl broker-group: unknown command read-only (did you mean readonly?)"},
		{[]string{"frobnicate"}, "qmqctl: unknown command frobnicate"},
		{[]string{"status", "extra"}, `qmqctl status: takes no arguments, got ["extra"]`},
		{[]string{"consumer-group"}, "qmqctl consumer-group: missing command (one of list, show, set, reset; --help says what each does)"},
		{[]string{"broker-group"}, "qmqctl broker-group: missing command (one of transfer-leader, readonly, writable; --help says what each does)"},
		{[]string{"help", "sendd"}, "qmqctl: unknown command sendd (did you mean send?)"},
		{[]string{"status", "--sever", "x"}, "qmqctl status: unknown flag --sever (did you mean --server?)"},
		{[]string{"--sever", "x", "status"}, "qmqctl: unknown flag --sever (did you mean --server?)"},
		{[]string{"send", "--subject", "x", "--count", "many"}, `qmqctl send: invalid value "many" for --count: not a whole number`},
		{[]string{"send", "--subject"}, "qmqctl send: flag --subject needs a value"},
		{[]string{"send", "hi"}, "qmqctl send: required flag --subject not set"},
		{[]string{"send", "--subject", "x", "--count", "-1", "hi"}, "qmqctl send: --count -1: at least 1"},
		{[]string{"send", "--subject", "x", "a", "b"}, "qmqctl send: takes at most one BODY argument, got 2 (quote the body)"},
		{[]string{"consume", "--subject", "x"}, "qmqctl consume: required flag --group not set"},
		{[]string{"consume", "--subject", "x", "--group", "g", "--count", "-1"}, "qmqctl consume: --count -1: 0 (until --timeout passes with none) or more"},
		{[]string{"consume", "--subject", "x", "--group", "g", "--body", "hex"}, `qmqctl consume: --body "hex": text, base64 or raw`},
		{[]string{"consumer-group", "set", "--subject", "x", "--group", "g"}, "qmqctl consumer-group set: give at least one setting to change: " +
			"--max-deliveries, --retry-first, --retry-max, --ack-wait, --max-in-flight or --idle-expiry"},
		{[]string{"app", "create", "--sned", "x", "billing"}, "qmqctl app create: unknown flag --sned (did you mean --send?)"},
		{[]string{"app", "create", "billing", "ops"}, "qmqctl app create: takes one argument, the application's CODE (got 2)"},
		{[]string{"join", "--broker-grop", "g1"}, "qmqctl join: unknown flag --broker-grop (did you mean --broker-group?)"},
		{[]string{"join", "--id", "x", "--raft", "a:1", "--addr", "a:2"}, "qmqctl join: required flag --broker-group not set"},
		{[]string{"broker-group", "readonly"}, "qmqctl broker-group readonly: takes one argument, the broker group's name (got 0)"},
		{[]string{"backup", "--out", "f"}, "qmqctl backup: give --broker-group NAME or --meta"},
		{[]string{"backup", "--meta", "--broker-group", "g1", "--out", "f"}, "qmqctl backup: give --broker-group NAME or --meta, not both"},
		{[]string{"backup", "--meta"}, "qmqctl backup: required flag --out not set"},
		{[]string{"completion", "tcsh"}, "qmqctl completion: unknown shell tcsh: bash, zsh or fish"},
		{[]string{"completion", "zhs"}, "qmqctl completion: unknown shell zhs (did you mean zsh?): bash, zsh or fish"},
	} {
		out, stderr, status := runCLIStatus(append([]string{"--server", dead}, c.args...)...)
		if status != 2 || stderr != c.want+"\n" || out != "" {
			t.Errorf("qmqctl %s: exit status %d, stderr %q, stdout %q; want 2, %q and nothing", strings.Join(c.args, " "), status, stderr, out, c.want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"send", "--help"}, {"help", "consumer-group", "set"}, {"consumer-group", "--help"}, {}} {
		out, stderr, status := runCLIStatus(args...)
		if status != 0 || stderr != "" || !strings.Contains(out, "USAGE") {
			t.Errorf("qmqctl %s: exit status %d, stderr %q, stdout %q; want the help", strings.Join(args, " "), status, stderr, out)
		}
	}
	// As a process: the status is the process's.
	cmd := qmqctlCommand(t, context.Background(), "send", "--subjet", "x")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || stderr.String() != "qmqctl send: unknown flag --subjet (did you mean --subject?)\n" {
		t.Errorf("qmqctl send --subjet as a process: %v, stderr %q", err, stderr.String())
	}
}

// Suggest offers the flag or command one edit or so away, or one the word
// starts, and nothing for a word near none.
func TestSuggest(t *testing.T) {
	names := []string{"--subject", "--server", "--count", "--consumer", "status", "send", "consume", "consumer-group"}
	for typed, want := range map[string]string{"--subjet": "--subject", "--sevrer": "--server", "--cuont": "--count",
		"stauts": "status", "sned": "send", "consumer-grop": "consumer-group", "--xyz": "", "frobnicate": "", "--sub": "--subject"} {
		if got := cmdline.Suggest(typed, names); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", typed, got, want)
		}
	}
}

// Global flags given after the command are read as if given before it;
// a flag of the command itself, and everything after "--", stay.
func TestGlobalFlagsAfterTheCommand(t *testing.T) {
	app := newApp()
	for _, c := range []struct{ in, want string }{
		{"qmqctl status --server X", "qmqctl --server X status"},
		{"qmqctl status --server=X --json", "qmqctl --server=X status --json"},
		{"qmqctl --server A consumer-group list --tls-ca ca.pem --subject s", "qmqctl --server A --tls-ca ca.pem consumer-group list --subject s"},
		{"qmqctl app create billing --send x --app ops --secret-file f", "qmqctl --app ops --secret-file f app create billing --send x"},
		{"qmqctl send --subject x -- --server y", "qmqctl send --subject x -- --server y"},
		{"qmqctl send --subject --server", "qmqctl send --subject --server"},
		{"qmqctl status --server --generate-bash-completion", "qmqctl status --server --generate-bash-completion"},
	} {
		if got := strings.Join(cmdline.MoveGlobalFlags(app, strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("%s: moved to %s, want %s", c.in, got, c.want)
		}
	}
	// The address is used: nothing listens there, and the error names it.
	dead := testcluster.Addr(t)
	for _, args := range [][]string{{"status", "--server", dead}, {"status", "--server=" + dead}, {"consumer-group", "list", "--server", dead}} {
		_, stderr, status := runCLIStatus(args...)
		if status != 1 || !strings.Contains(stderr, "cannot reach "+dead) {
			t.Errorf("qmqctl %s: exit status %d, stderr %q; want 1, naming %s", strings.Join(args, " "), status, stderr, dead)
		}
	}
}
