package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestParseRaftLog(t *testing.T) {
	for _, s := range []string{"wal", "bolt"} {
		if l, err := ParseRaftLog(s); err != nil || string(l) != s {
			t.Errorf("ParseRaftLog(%q) = %q, %v", s, l, err)
		}
	}
	for _, s := range []string{"", "WAL", "Bolt", "boltdb", "raft-wal", " wal", "wal "} {
		if _, err := ParseRaftLog(s); !errors.Is(err, ErrRaftLog) {
			t.Errorf("ParseRaftLog(%q): %v, want ErrRaftLog", s, err)
		}
	}
}

func TestConfigRefusesAnUnknownRaftLog(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	if cfg.RaftLog != RaftLogWAL {
		t.Fatalf("default RaftLog %q, want %q", cfg.RaftLog, RaftLogWAL)
	}
	for _, l := range []RaftLog{RaftLogWAL, RaftLogBolt} {
		cfg.RaftLog = l
		if err := cfg.Validate(); err != nil {
			t.Errorf("RaftLog %q: %v", l, err)
		}
	}
	for _, l := range []RaftLog{"", "lsm"} {
		cfg.RaftLog = l
		if err := cfg.Validate(); !errors.Is(err, ErrRaftLog) {
			t.Errorf("RaftLog %q: %v, want ErrRaftLog", l, err)
		}
	}
}

// dataDir returns a new directory holding what each of has names: the
// bolt file, the WAL directory, or both.
func dataDir(t *testing.T, has ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, h := range has {
		var err error
		switch h {
		case boltFile:
			err = os.WriteFile(filepath.Join(dir, boltFile), nil, 0o644)
		case walDir:
			err = os.Mkdir(filepath.Join(dir, walDir), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPickRaftLog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		has   []string
		want  RaftLog
		kind  RaftLog
		found bool
	}{
		{"new directory, wal", nil, RaftLogWAL, RaftLogWAL, false},
		{"new directory, bolt", nil, RaftLogBolt, RaftLogBolt, false},
		{"raft.db from an earlier version", []string{boltFile}, RaftLogWAL, RaftLogBolt, true},
		{"raft.db, bolt configured", []string{boltFile}, RaftLogBolt, RaftLogBolt, true},
		{"raft-wal", []string{walDir}, RaftLogWAL, RaftLogWAL, true},
		{"raft-wal, bolt configured", []string{walDir}, RaftLogBolt, RaftLogWAL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, found, err := pickRaftLog(dataDir(t, tc.has...), tc.want)
			if err != nil || kind != tc.kind || found != tc.found {
				t.Fatalf("pickRaftLog = %q, %v, %v; want %q, %v", kind, found, err, tc.kind, tc.found)
			}
		})
	}
	for _, want := range []RaftLog{RaftLogWAL, RaftLogBolt} {
		dir := dataDir(t, boltFile, walDir)
		_, err := openRaftLog(dir, want, hclog.NewNullLogger())
		if !errors.Is(err, ErrTwoRaftLogs) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("a directory with both stores, %q configured: %v, want ErrTwoRaftLogs naming %s", want, err, dir)
		}
	}
}

// storeLogs appends entries first..last, each carrying its index as data.
func storeLogs(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	var batch []*raft.Log
	for i := first; i <= last; i++ {
		batch = append(batch, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte(strings.Repeat("x", int(i%64)))})
	}
	if err := s.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
}

// wantLogs checks the store holds exactly entries first..last as storeLogs
// wrote them.
func wantLogs(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	if f, _ := s.FirstIndex(); f != first {
		t.Fatalf("first index %d, want %d", f, first)
	}
	if l, _ := s.LastIndex(); l != last {
		t.Fatalf("last index %d, want %d", l, last)
	}
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || l.Index != i || len(l.Data) != int(i%64) {
			t.Fatalf("entry %d: %+v, %v", i, l, err)
		}
	}
}

// mustOpenRaftLog opens the Raft log store in dir, failing the test if
// it cannot.
func mustOpenRaftLog(t *testing.T, dir string, want RaftLog) *raftLogStore {
	t.Helper()
	s, err := openRaftLog(dir, want, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open the raft log in %s: %v", dir, err)
	}
	return s
}

func TestRaftLogStoresKeepEntriesAndStableStateAcrossReopen(t *testing.T) {
	for _, kind := range []RaftLog{RaftLogWAL, RaftLogBolt} {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpenRaftLog(t, dir, kind)
			if s.kind != kind {
				t.Fatalf("opened %q, want %q", s.kind, kind)
			}
			storeLogs(t, s.logs, 1, 100)
			if err := s.stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := s.stable.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Opened again in the same process, as a node restarted in
			// place is: every file and lock of the first must be released.
			s = mustOpenRaftLog(t, dir, RaftLogWAL)
			defer s.Close()
			if s.kind != kind {
				t.Fatalf("reopened as %q, want %q", s.kind, kind)
			}
			wantLogs(t, s.logs, 1, 100)
			if term, err := s.stable.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
				t.Fatalf("term %d, %v; want 7", term, err)
			}
			if v, err := s.stable.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
				t.Fatalf("vote %q, %v; want n2", v, err)
			}
			onDisk := map[RaftLog]string{RaftLogWAL: filepath.Join(walDir, "wal-meta.db"), RaftLogBolt: boltFile}
			for k, path := range onDisk {
				_, err := os.Stat(filepath.Join(dir, path))
				if (k == kind) != (err == nil) {
					t.Errorf("%s: %v (the store is %s)", path, err, kind)
				}
			}
		})
	}
}

// Raft cuts a follower's log back when a new leader's entries conflict with
// it; the node must start again afterwards and keep appending.
func TestWALStartsAfterItsTailWasCut(t *testing.T) {
	dir := t.TempDir()
	s := mustOpenRaftLog(t, dir, RaftLogWAL)
	storeLogs(t, s.logs, 1, 10)
	storeLogs(t, s.logs, 11, 20)
	if err := s.logs.DeleteRange(16, 20); err != nil {
		t.Fatal(err)
	}
	storeLogs(t, s.logs, 16, 18)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpenRaftLog(t, dir, RaftLogWAL)
	defer s.Close()
	wantLogs(t, s.logs, 1, 18)
	storeLogs(t, s.logs, 19, 25)
	wantLogs(t, s.logs, 1, 25)
}

func TestRaftLogInUseIsRefused(t *testing.T) {
	for _, kind := range []RaftLog{RaftLogWAL, RaftLogBolt} {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpenRaftLog(t, dir, kind)
			if _, err := openRaftLog(dir, kind, hclog.NewNullLogger()); !errors.Is(err, ErrRaftLogInUse) {
				t.Fatalf("second open: %v, want ErrRaftLogInUse", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpenRaftLog(t, dir, kind)
			s.Close()
		})
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
