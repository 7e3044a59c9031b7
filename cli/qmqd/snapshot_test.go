package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The snapshot flags: Raft's defaults unless given, accepted at their
// lowest, refused under it, naming the flag.
func TestSnapshotFlags(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		interval  time.Duration
		threshold uint64
		err       string // the refusal names this; "" when accepted
	}{
		{"defaults", nil, 30 * time.Second, 2048, ""},
		{"lowest", []string{"--snapshot-interval", "100ms", "--snapshot-threshold", "1"}, 100 * time.Millisecond, 1, ""},
		{"often", []string{"--snapshot-interval", "5s", "--snapshot-threshold", "64"}, 5 * time.Second, 64, ""},
		{"interval too short", []string{"--snapshot-interval", "99ms"}, 0, 0, "--snapshot-interval 99ms: at least 100ms"},
		{"interval negative", []string{"--snapshot-interval", "-1s"}, 0, 0, "--snapshot-interval -1s"},
		{"no threshold", []string{"--snapshot-threshold", "0"}, 0, 0, "--snapshot-threshold 0: at least 1"},
		{"threshold negative", []string{"--snapshot-threshold", "-1"}, 0, 0, `invalid value "-1" for flag -snapshot-threshold`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := brokerSettingsOf(t, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if !strings.HasPrefix(tc.err, "invalid value") && !errors.Is(err, errInvalidFlag) {
					t.Fatalf("error %v does not wrap errInvalidFlag", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SnapshotInterval != tc.interval || cfg.SnapshotThreshold != tc.threshold {
				t.Fatalf("snapshot interval %s, threshold %d; want %s, %d", cfg.SnapshotInterval, cfg.SnapshotThreshold, tc.interval, tc.threshold)
			}
			cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
			cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the node refuses what the flags accept: %v", err)
			}
		})
	}
}
