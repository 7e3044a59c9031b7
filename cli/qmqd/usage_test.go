package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

// runQmqd runs qmqd with args as its main does, and returns what it
// printed on stdout and stderr and its exit status.
func runQmqd(args ...string) (stdout, stderr string, status int) {
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	status = exitStatus(cmdline.Execute(app, append([]string{"qmqd"}, args...)), &errOut)
	return out.String(), errOut.String(), status
}

// A usage mistake is one line on stderr naming it as typed, with a "did
// you mean", exit status 2, and no help on stdout; nothing starts.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"devv"}, "qmqd: unknown command devv (did you mean dev?)"},
		{[]string{"dev", "--lisen", "127.0.0.1:0"}, "qmqd dev: unknown flag --lisen (did you mean --listen?)"},
		{[]string{"broker", "--broker-grop", "g1"}, "qmqd broker: unknown flag --broker-grop (did you mean --broker-group?)"},
		{[]string{"broker", "--id", "n1"}, "qmqd broker: required flags --data, --listen, --raft, --broker-group not set"},
		{[]string{"meta", "--election-timeout", "soon"}, `qmqd meta: invalid value "soon" for --election-timeout: not a duration (such as 500ms, 90s, 2h30m)`},
		{[]string{"--log-levle", "debug", "dev"}, "qmqd: unknown flag --log-levle (did you mean --log-level?)"},
		{[]string{"dev", "--raft-log", "sqlite", "--data", "x"}, `qmqd: invalid --raft-log "sqlite": wal or bolt`},
		{[]string{"restore", "--from", "f", "--data", "d"}, "qmqd restore: required flags --id, --raft not set"},
		{[]string{"broker", "--broker-group", "g1", "--id", "n1", "--data", "x", "--listen", "127.0.0.1:0", "--raft", "127.0.0.1:0",
			"--initial-version", "3"}, "qmqd: invalid --initial-version 3: 1-2"},
		{[]string{"broker", "--broker-group", "g1", "--id", "n1", "--data", "x", "--listen", "127.0.0.1:0", "--raft", "127.0.0.1:0",
			"--initial-version", "0"}, "qmqd: invalid --initial-version 0: 1-2"},
	} {
		out, stderr, status := runQmqd(c.args...)
		if status != 2 || stderr != c.want+"\n" || out != "" {
			t.Errorf("qmqd %s: exit status %d, stderr %q, stdout %q; want 2, %q and nothing", strings.Join(c.args, " "), status, stderr, out, c.want)
		}
	}
	if out, stderr, status := runQmqd("broker", "--help"); status != 0 || stderr != "" || !strings.Contains(out, "--broker-group NAME, --group NAME") {
		t.Errorf("qmqd broker --help: exit status %d, stderr %q:\n%s", status, stderr, out)
	}
}

// The broker group is --broker-group, or --group as before; --log-level
// goes after the command too. (The bad --raft-log stops it before it
// starts anything, once its flags were read.)
func TestBrokerGroupFlag(t *testing.T) {
	for _, flag := range []string{"--broker-group", "--group"} {
		_, stderr, status := runQmqd("broker", flag, "g1", "--id", "n1", "--data", t.TempDir(), "--listen", "127.0.0.1:0",
			"--raft", "127.0.0.1:0", "--raft-log", "sqlite", "--log-level", "warn")
		if status != 2 || stderr != "qmqd: invalid --raft-log \"sqlite\": wal or bolt\n" {
			t.Errorf("qmqd broker %s g1: exit status %d, stderr %q", flag, status, stderr)
		}
	}
}
