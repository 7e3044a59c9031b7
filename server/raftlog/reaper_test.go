package raftlog

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/test/poll"
)

// A compaction's segments are unlinked after raft-wal's write lock is
// released: while the unlinks are held up, the compaction returns and
// appends go on. Deleting them under the lock, as raft-wal does, stopped
// appends for as long as the unlinks took.
func TestWALCompactionDoesNotWaitForUnlinks(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 64<<10, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	unlink := s.reaper.unlink
	s.reaper.unlink = func(path string) error {
		<-release // an unlink that takes as long as the test wants
		return unlink(path)
	}
	const size = 3000
	for i := uint64(1); i <= 500; i += 5 {
		if err := s.logs.StoreLogs(bigEntries(i, 5, size)); err != nil {
			t.Fatal(err)
		}
	}
	MaxFiles := func(pattern string) int {
		m, _ := filepath.Glob(filepath.Join(dir, WALDir, pattern))
		return len(m)
	}
	done := make(chan error, 1)
	go func() {
		if err := s.logs.DeleteRange(1, 450); err != nil {
			done <- err
			return
		}
		done <- s.logs.StoreLogs(bigEntries(501, 5, size))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the compaction or the next append waited for the unlinks")
	}
	if MaxFiles("*.wal") > 4 || MaxFiles("*"+reapSuffix) == 0 {
		t.Fatalf("%d segments in the log and %d renamed while the unlinks wait; want at most 4 and some",
			MaxFiles("*.wal"), MaxFiles("*"+reapSuffix))
	}
	close(release)
	poll.Until(t, 10*time.Second, "renamed segments unlinked", func() bool { return MaxFiles("*"+reapSuffix) == 0 })
	wantBigEntries(t, s.logs, 451, 505, size)
}

// Segments renamed for the reaper and left by a crash are removed when the
// log opens again; the log's own segments stay.
func TestWALOpenRemovesSegmentsLeftToReap(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 64<<10, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.logs.StoreLogs(bigEntries(1, 5, 3000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, WALDir, "00000000000000000001-0000000000000009.wal"+reapSuffix)
	if err := os.WriteFile(left, []byte("a segment a crash left renamed"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = openWAL(dir, 64<<10, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	poll.Until(t, 10*time.Second, "the renamed segment removed", func() bool {
		_, err := os.Stat(left)
		return os.IsNotExist(err)
	})
	wantBigEntries(t, s.logs, 1, 5, 3000)
}
