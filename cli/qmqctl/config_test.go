package main

import (
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// config show, config set and status on a cluster: a change reaches the
// broker group named and no other, and a value past its bound is refused
// before anything is sent, naming the flag.
func TestConfigCommands(t *testing.T) {
	server := startCluster(t)
	var before []admin.BrokerGroupConfig
	runJSON(t, &before, "--server", server, "config", "show", "--broker-group", "g1")
	if len(before) != 1 || before[0].Config.Source != "broker-group" || before[0].Config.RetentionAge != 7*24*time.Hour || before[0].Config.MaxPull != 1000 {
		t.Fatalf("config show before any change: %+v", before)
	}
	out := mustRun(t, "--server", server, "config", "set", "--broker-group", "g1", "--max-pull", "77", "--dedup-window", "5m",
		"--segment-size", "2", "--index-segment-size", "128", "--retention-size", "8")
	for _, want := range []string{"broker group g1: configuration set at entry", "max-pull            77", "dedup-window        5m", "segment-size        2MiB",
		"index-segment-size  128KiB", "retention-size      8MiB", "retention-age       168h"} {
		if !strings.Contains(out, want) {
			t.Errorf("config set printed\n%s\nwithout %q", out, want)
		}
	}
	var after []admin.BrokerGroupConfig
	runJSON(t, &after, "--server", server, "config", "show", "--broker-group", "g1")
	if c := after[0].Config; c.MaxPull != 77 || c.DedupWindow != 5*time.Minute || c.SegmentSize != 2<<20 || c.IndexSegmentSize != 128<<10 ||
		c.RetentionBytes != 8<<20 || c.Index <= before[0].Config.Index {
		t.Fatalf("config show after the change: %+v", c)
	}
	var st struct {
		BrokerConfigs []admin.BrokerGroupConfig `json:"broker_configs"`
	}
	runJSON(t, &st, "--server", server, "status")
	if len(st.BrokerConfigs) != 2 {
		t.Fatalf("status shows %d broker configurations, want 2", len(st.BrokerConfigs))
	}
	for _, c := range st.BrokerConfigs {
		if want := map[string]int{"g1": 77, "g2": 1000}[c.BrokerGroup]; c.Config.MaxPull != want {
			t.Errorf("status: %s's max-pull is %d, want %d", c.BrokerGroup, c.Config.MaxPull, want)
		}
	}
	text := mustRun(t, "--server", server, "status")
	if !strings.Contains(text, "BROKER-GROUP") || !strings.Contains(text, "broker-group@") {
		t.Errorf("status shows no configuration:\n%s", text)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-pull", "0"}, "--max-pull 0: 1..10000"},
		{[]string{"--max-pull", "10001"}, "--max-pull 10001: 1..10000"},
		{[]string{"--max-unacked", "100001"}, "--max-unacked 100001: 1..100000"},
		{[]string{"--dedup-window", "31m"}, "--dedup-window 31m0s"},
		{[]string{"--dedup-window", "1.5ms"}, "not a whole number of milliseconds"},
		{[]string{"--retention-age", "-1s"}, "--retention-age -1s"},
		{[]string{"--segment-size", "0"}, "--segment-size 0: 1..1024 MiB"},
		{[]string{"--segment-size", "1025"}, "--segment-size 1025"},
		{[]string{"--index-segment-size", "63"}, "--index-segment-size 63: 64..262144 KiB"},
		{[]string{"--retention-size", "-1"}, "--retention-size -1"},
		{[]string{"--retention-age", "1m", "--dedup-window", "2m"}, "below --dedup-window"},
		{[]string{"--retention-size", "1", "--segment-size", "2"}, "below --segment-size"},
		{nil, "give at least one setting"},
	} {
		_, err := runCLI(append([]string{"--server", server, "config", "set", "--broker-group", "g1"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config set %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	// What the leader refuses: a retention age under the group's window.
	if _, err := runCLI("--server", server, "config", "set", "--broker-group", "g1", "--retention-age", "4m"); err == nil ||
		!strings.Contains(err.Error(), "INVALID") || !strings.Contains(err.Error(), "below the dedup-window") {
		t.Errorf("a retention age under the window: %v", err)
	}
	var last []admin.BrokerGroupConfig
	runJSON(t, &last, "--server", server, "config", "show", "--broker-group", "g1")
	if last[0].Config != after[0].Config {
		t.Fatalf("refused changes changed the configuration: %+v, was %+v", last[0].Config, after[0].Config)
	}
	if _, err := runCLI("--server", server, "config", "show", "--group", "nope"); err == nil || !strings.Contains(err.Error(), `no broker group "nope"`) {
		t.Errorf("config show of an unknown group: %v", err)
	}
}
