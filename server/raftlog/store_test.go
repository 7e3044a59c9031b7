package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestParse(t *testing.T) {
	for _, s := range []string{"wal", "bolt"} {
		if l, err := Parse(s); err != nil || string(l) != s {
			t.Errorf("Parse(%q) = %q, %v", s, l, err)
		}
	}
	for _, s := range []string{"", "WAL", "Bolt", "boltdb", "raft-wal", " wal", "wal "} {
		if _, err := Parse(s); !errors.Is(err, ErrUnknownKind) {
			t.Errorf("Parse(%q): %v, want ErrUnknownKind", s, err)
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
		case BoltFile:
			err = os.WriteFile(filepath.Join(dir, BoltFile), nil, 0o644)
		case WALDir:
			err = os.Mkdir(filepath.Join(dir, WALDir), 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name  string
		has   []string
		want  Kind
		kind  Kind
		found bool
	}{
		{"new directory, wal", nil, WAL, WAL, false},
		{"new directory, bolt", nil, Bolt, Bolt, false},
		{"raft.db from an earlier version", []string{BoltFile}, WAL, Bolt, true},
		{"raft.db, bolt configured", []string{BoltFile}, Bolt, Bolt, true},
		{"raft-wal", []string{WALDir}, WAL, WAL, true},
		{"raft-wal, bolt configured", []string{WALDir}, Bolt, WAL, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, found, err := pick(dataDir(t, tc.has...), tc.want)
			if err != nil || kind != tc.kind || found != tc.found {
				t.Fatalf("pick = %q, %v, %v; want %q, %v", kind, found, err, tc.kind, tc.found)
			}
		})
	}
	for _, want := range []Kind{WAL, Bolt} {
		dir := dataDir(t, BoltFile, WALDir)
		_, err := Open(dir, want, hclog.NewNullLogger())
		if !errors.Is(err, ErrTwoStores) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("a directory with both stores, %q configured: %v, want ErrTwoStores naming %s", want, err, dir)
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

// mustOpen opens the Raft log store in dir, failing the test if
// it cannot.
func mustOpen(t *testing.T, dir string, want Kind) *Store {
	t.Helper()
	s, err := Open(dir, want, hclog.NewNullLogger())
	if err != nil {
		t.Fatalf("open the raft log in %s: %v", dir, err)
	}
	return s
}

func TestStoresKeepEntriesAndStableStateAcrossReopen(t *testing.T) {
	for _, kind := range []Kind{WAL, Bolt} {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, kind)
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
			s = mustOpen(t, dir, WAL)
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
			onDisk := map[Kind]string{WAL: filepath.Join(WALDir, "wal-meta.db"), Bolt: BoltFile}
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
	s := mustOpen(t, dir, WAL)
	storeLogs(t, s.logs, 1, 10)
	storeLogs(t, s.logs, 11, 20)
	if err := s.logs.DeleteRange(16, 20); err != nil {
		t.Fatal(err)
	}
	storeLogs(t, s.logs, 16, 18)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, WAL)
	defer s.Close()
	wantLogs(t, s.logs, 1, 18)
	storeLogs(t, s.logs, 19, 25)
	wantLogs(t, s.logs, 1, 25)
}

func TestInUseIsRefused(t *testing.T) {
	for _, kind := range []Kind{WAL, Bolt} {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			s := mustOpen(t, dir, kind)
			if _, err := Open(dir, kind, hclog.NewNullLogger()); !errors.Is(err, ErrInUse) {
				t.Fatalf("second open: %v, want ErrInUse", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = mustOpen(t, dir, kind)
			s.Close()
		})
	}
}
