package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/test/testcluster"
)

// TestConsumerGroupBadFlags: every bad value is refused with a clear error
// before anything is sent (nothing listens at the server address, so an
// error that names the flag came before any connection).
func TestConsumerGroupBadFlags(t *testing.T) {
	dead := testcluster.Addr(t)
	g := []string{"--subject", "orders", "--group", "billing"}
	set := slices.Clip(append([]string{"consumer-group", "set"}, g...))
	reset := slices.Clip(append([]string{"consumer-group", "reset"}, g...))
	dl := func(cmd string, more ...string) []string {
		return append(append([]string{"deadletter", cmd}, g...), more...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"consumer-group", "show", "--subject", "orders"}, `required flag --group not set`},
		{[]string{"consumer-group", "show", "--group", "billing"}, `required flag --subject not set`},
		{[]string{"consumer-group", "show", "--subject", "orders!", "--group", "billing"}, `subject name "orders!": byte 6, '!', is not allowed: a name is 1 to 200 of the letters a-z and A-Z, the digits 0-9, '.', '_', '-' and ':', starting with a letter or a digit`},
		{[]string{"consumer-group", "show", "--subject", ".orders", "--group", "billing"}, `subject name ".orders": the first byte, '.', is not allowed`},
		{[]string{"consumer-group", "show", "--subject", "orders", "--group", strings.Repeat("g", 256)}, "consumer group name length 256"},
		{[]string{"consumer-group", "list", "--subject", "a b"}, `subject name "a b"`},
		{set, "give at least one setting to change"},
		{append(set, "--max-deliveries", "0"), "--max-deliveries 0: 1..10000"},
		{append(set, "--max-deliveries", "10001"), "--max-deliveries 10001: 1..10000"},
		{append(set, "--max-deliveries", "-1"), "--max-deliveries -1"},
		{append(set, "--max-deliveries", "many"), "invalid value"},
		{append(set, "--retry-first", "-1ms"), "--retry-first -1ms"},
		{append(set, "--retry-first", "17544h0m0.001s"), "--retry-first 17544h0m0.001s"},
		{append(set, "--retry-first", "1500us"), "not a whole number of milliseconds"},
		{append(set, "--retry-first", "soon"), "invalid value"},
		{append(set, "--retry-max", "-1ms"), "--retry-max -1ms"},
		{append(set, "--retry-max", "17544h0m0.001s"), "--retry-max 17544h0m0.001s"},
		{append(set, "--retry-first", "2s", "--retry-max", "1s"), "--retry-first 2s is longer than --retry-max 1s"},
		{append(set, "--ack-wait", "999ms"), "--ack-wait 999ms: 0 for none, or 1s..168h0m0s"},
		{append(set, "--ack-wait", "168h0m0.001s"), "--ack-wait 168h0m0.001s"},
		{append(set, "--ack-wait", "-1s"), "--ack-wait -1s"},
		{append(set, "--max-in-flight", "-1"), "--max-in-flight -1"},
		{append(set, "--max-in-flight", "100001"), "--max-in-flight 100001: 0 for the broker's default, or at most 100000"},
		{append(set, "--idle-expiry", "999ms"), "--idle-expiry 999ms: 0 for never, or 1s..17544h0m0s"},
		{append(set, "--idle-expiry", "17544h0m0.001s"), "--idle-expiry 17544h0m0.001s"},
		{reset, `required flag --to not set`},
		{append(reset, "--to", "yesterday"), `--to "yesterday": earliest, latest, or an RFC 3339 time`},
		{append(reset, "--to", "2026-01-31 09:00"), `--to "2026-01-31 09:00"`},
		{append(reset, "--to", "1969-12-31T23:59:59Z"), "before 1970"},
		{dl("list", "--limit", "0"), "--limit 0: 1..1000"},
		{dl("list", "--limit", "1001"), "--limit 1001: 1..1000"},
		{dl("list", "--offset", "-1"), "--offset -1: at least 0"},
		{dl("show", "--seq", "1"), `required flag --broker-group not set`},
		{dl("show", "--broker-group", "g1"), `required flag --seq not set`},
		{dl("show", "--broker-group", "g1", "--seq", "-1"), "--seq -1: at least 0"},
		{dl("show", "--broker-group", "g1", "--seq", "x"), "invalid value"},
		{dl("resend"), "give --all, or --broker-group with --seq"},
		{dl("resend", "--broker-group", "g1"), "give --all, or --broker-group with --seq"},
		{dl("resend", "--seq", "1"), "give --all, or --broker-group with --seq"},
		{dl("resend", "--all", "--seq", "1"), "not both"},
		{dl("resend", "--broker-group", "g1", "--seq", "-1"), "--seq -1: at least 0"},
		{dl("purge"), "give --all, or --broker-group with --seq"},
		{dl("purge", "--all", "--broker-group", "g1"), "not both"},
		{dl("purge", "--broker-group", "g1", "--seq", "3", "--seq", "-2"), "--seq -2: at least 0"},
	} {
		out, err := runCLI(append([]string{"--server", dead}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("qmqctl %s: error %v, want one saying %q\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}
}

// TestConsumerGroupFlagsAtTheirLimits: values exactly at each limit are
// sent and accepted by the broker.
func TestConsumerGroupFlagsAtTheirLimits(t *testing.T) {
	srv := startCluster(t)
	set := []string{"--server", srv, "consumer-group", "set", "--subject", "orders", "--group", "billing"}
	for _, args := range [][]string{
		{"--max-deliveries", "1"}, {"--max-deliveries", "10000"},
		{"--retry-first", "0s", "--retry-max", "0s"}, {"--retry-max", "17544h", "--retry-first", "17544h"},
		{"--ack-wait", "1s"}, {"--ack-wait", "168h"}, {"--ack-wait", "0"},
		{"--max-in-flight", "0"}, {"--max-in-flight", "100000"},
		{"--idle-expiry", "1s"}, {"--idle-expiry", "17544h"}, {"--idle-expiry", "0"},
	} {
		mustRun(t, append(set, args...)...)
	}
	dl := []string{"--server", srv, "deadletter", "list", "--subject", "orders", "--group", "billing"}
	mustRun(t, append(dl, "--limit", "1")...)
	mustRun(t, append(dl, "--limit", "1000", "--offset", "0")...)
}
