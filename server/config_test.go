package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/server/raftlog"
)

func TestConfigRefusesAnUnknownRaftLog(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.RaftLog != raftlog.WAL {
		t.Fatalf("default RaftLog %q, want %q", cfg.RaftLog, raftlog.WAL)
	}
	for _, l := range []raftlog.Kind{raftlog.WAL, raftlog.Bolt} {
		cfg.RaftLog = l
		if err := cfg.Validate(); err != nil {
			t.Errorf("RaftLog %q: %v", l, err)
		}
	}
	for _, l := range []raftlog.Kind{"", "lsm"} {
		cfg.RaftLog = l
		if err := cfg.Validate(); !errors.Is(err, raftlog.ErrUnknownKind) {
			t.Errorf("RaftLog %q: %v, want ErrUnknownKind", l, err)
		}
	}
}

// A batch may go past MaxBatchBytes by one send request; the Raft entry it
// makes must still be one raft-wal reads back.
func TestConfigBoundsMaxBatchBytes(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	for _, tc := range []struct {
		bytes int
		ok    bool
	}{
		{MaxMaxBatchBytes - 1, true},
		{MaxMaxBatchBytes, true},
		{MaxMaxBatchBytes + 1, false},
		{64 << 20, false},
	} {
		cfg.MaxBatchBytes = tc.bytes
		if err := cfg.Validate(); (err == nil) != tc.ok {
			t.Errorf("MaxBatchBytes %d: %v (want accepted: %v)", tc.bytes, err, tc.ok)
		}
	}
}

// TestConfigRefusesASourceThatIsNoIP: --source-ip takes an IP address,
// v4 or v6; anything else is refused at start, saying so.
func TestConfigRefusesASourceThatIsNoIP(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	for _, ip := range []string{"", "127.0.0.7", "::1"} {
		cfg.SourceIP = ip
		if err := cfg.Validate(); err != nil {
			t.Errorf("source IP %q: %v", ip, err)
		}
	}
	for _, ip := range []string{"localhost", "127.0.0.1:6222", "10.0.0.256"} {
		cfg.SourceIP = ip
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "not an IP address") {
			t.Errorf("source IP %q: %v, want refused", ip, err)
		}
	}
}

// TestConfigRefusesNegativeBackupLimits: each negative backup limit is
// refused, naming the limits; zero takes the defaults.
func TestConfigRefusesNegativeBackupLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if l := cfg.Backups.withDefaults(); l.Max != DefaultMaxBackups || l.Idle != DefaultBackupIdle || l.Rate != 0 {
		t.Errorf("default backup limits %+v", l)
	}
	for _, l := range []BackupLimits{{Max: -1}, {Idle: -time.Second}, {Rate: -1}} {
		cfg.Backups = l
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "negative backup limits") {
			t.Errorf("backup limits %+v: %v, want refused", l, err)
		}
	}
}
