package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/server/raftlog"
)

func TestRaftLogFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want raftlog.Kind
		err  string // the refusal names this; "" when accepted
	}{
		{"default", nil, raftlog.WAL, ""},
		{"wal", []string{"--raft-log", "wal"}, raftlog.WAL, ""},
		{"bolt", []string{"--raft-log", "bolt"}, raftlog.Bolt, ""},
		{"empty", []string{"--raft-log", ""}, "", `--raft-log "": wal or bolt`},
		{"capitals", []string{"--raft-log", "WAL"}, "", `--raft-log "WAL": wal or bolt`},
		{"a store's full name", []string{"--raft-log", "raft-boltdb"}, "", `--raft-log "raft-boltdb": wal or bolt`},
		{"a trailing space", []string{"--raft-log", "wal "}, "", `--raft-log "wal ": wal or bolt`},
		{"no value", []string{"--raft-log"}, "", "flag needs an argument: -raft-log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := brokerSettingsOf(t, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(tc.err, "wal or bolt") && !errors.Is(err, errInvalidFlag) {
					t.Fatalf("error %v does not wrap errInvalidFlag", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RaftLog != tc.want {
				t.Fatalf("RaftLog %q, want %q", cfg.RaftLog, tc.want)
			}
		})
	}
}

func TestRaftLogCacheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int64
		err  bool
	}{
		{"default", nil, raftlog.DefaultCache, false},
		{"none", []string{"--raft-log-cache", "0"}, 0, false},
		{"one MiB", []string{"--raft-log-cache", "1"}, 1 << 20, false},
		{"the largest", []string{"--raft-log-cache", "1048576"}, 1 << 40, false},
		{"over the largest", []string{"--raft-log-cache", "1048577"}, 0, true},
		{"negative", []string{"--raft-log-cache", "-1"}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := brokerSettingsOf(t, tc.args...)
			if tc.err {
				if !errors.Is(err, errInvalidFlag) || !strings.Contains(err.Error(), "--raft-log-cache") {
					t.Fatalf("error %v, want errInvalidFlag naming --raft-log-cache", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RaftLogCache != tc.want {
				t.Fatalf("RaftLogCache %d, want %d", cfg.RaftLogCache, tc.want)
			}
		})
	}
}
