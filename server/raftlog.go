package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"go.etcd.io/bbolt"
)

// RaftLog names the store that keeps a node's Raft log and its stable state
// (current term, vote).
type RaftLog string

const (
	// RaftLogWAL is hashicorp/raft-wal in the data directory's raft-wal/:
	// segment files written in append order, one fsync per batch of entries,
	// and a small bolt file (wal-meta.db) for the stable state and the list
	// of segments.
	RaftLogWAL RaftLog = "wal"
	// RaftLogBolt is hashicorp/raft-boltdb in the data directory's raft.db:
	// a B+tree, two fdatasyncs per batch of entries.
	RaftLogBolt RaftLog = "bolt"
)

// The names of the two stores in a node's data directory.
const (
	boltFile = "raft.db"
	walDir   = "raft-wal"
)

// storeLockTimeout is how long opening a log store waits for another
// process (a node still stopping) to let go of it.
const storeLockTimeout = time.Second

var (
	// ErrRaftLog is wrapped by the errors about a RaftLog value that names
	// no store.
	ErrRaftLog = errors.New("server: raft log")
	// ErrTwoRaftLogs is returned when a data directory holds both stores: a
	// node only ever writes one, so which is its log cannot be told.
	ErrTwoRaftLogs = errors.New("server: raft log: the data directory holds both raft.db (raft-boltdb) and raft-wal/ (raft-wal)")
	// ErrRaftLogInUse is returned when another process holds the store
	// open: two nodes on one data directory.
	ErrRaftLogInUse = errors.New("server: raft log: in use by another process")
)

// ParseRaftLog returns the store s names ("wal" or "bolt").
func ParseRaftLog(s string) (RaftLog, error) {
	switch l := RaftLog(s); l {
	case RaftLogWAL, RaftLogBolt:
		return l, nil
	}
	return "", fmt.Errorf("%w: %q is neither %q nor %q", ErrRaftLog, s, RaftLogWAL, RaftLogBolt)
}

// raftLogStore is a node's Raft log and stable store, of either kind.
type raftLogStore struct {
	kind   RaftLog
	logs   raft.LogStore
	stable raft.StableStore
	reaper *segmentReaper // raft-wal's: unlinks the segments it deleted
	files  *segmentFiles  // raft-wal's: its open sealed segment files
	close  func() error
}

// Close closes the store's files and releases its lock.
func (s *raftLogStore) Close() error { return s.close() }

// pickRaftLog returns the store dir holds, or want for a directory that
// holds none yet; found says whether it holds one. A directory holding
// both is refused.
func pickRaftLog(dir string, want RaftLog) (kind RaftLog, found bool, err error) {
	bolt, err := exists(filepath.Join(dir, boltFile))
	if err != nil {
		return "", false, err
	}
	wal, err := exists(filepath.Join(dir, walDir))
	if err != nil {
		return "", false, err
	}
	switch {
	case bolt && wal:
		return "", false, fmt.Errorf("%w in %s: a node writes only one; move the other out of the directory before starting it",
			ErrTwoRaftLogs, dir)
	case bolt:
		return RaftLogBolt, true, nil
	case wal:
		return RaftLogWAL, true, nil
	}
	return want, false, nil
}

// openRaftLog opens the Raft log store in dir: the one the directory
// already holds, else a new one of kind want.
func openRaftLog(dir string, want RaftLog, log hclog.Logger) (*raftLogStore, error) {
	if _, err := ParseRaftLog(string(want)); err != nil {
		return nil, err
	}
	kind, found, err := pickRaftLog(dir, want)
	if err != nil {
		return nil, err
	}
	switch {
	case found && kind == RaftLogBolt && want == RaftLogWAL:
		log.Info("raft log: raft-boltdb (data directory from an earlier version)")
	case found && kind != want:
		log.Info("raft log: the data directory's store, not the one configured for new directories", "raft-log", kind, "configured", want)
	}
	if kind == RaftLogBolt {
		return openBolt(dir)
	}
	return openWAL(dir, walSegmentSize, log)
}

func openBolt(dir string) (*raftLogStore, error) {
	b, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, boltFile),
		// Without these, bolt rewrites its whole freelist on every commit.
		BoltOptions: &bbolt.Options{Timeout: storeLockTimeout, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrRaftLogInUse, filepath.Join(dir, boltFile))
	}
	if err != nil {
		return nil, fmt.Errorf("server: open raft log %s: %w", filepath.Join(dir, boltFile), err)
	}
	return &raftLogStore{kind: RaftLogBolt, logs: b, stable: b, close: b.Close}, nil
}

// openWAL opens (or creates) the raft-wal store in dir/raft-wal. raft-wal
// fsyncs every batch of entries before StoreLogs returns and commits the
// stable state in bolt with an fdatasync, as Raft requires; it takes no
// lock of its own that gives up, so the directory is locked here first.
// New segment files are segmentSize bytes (walSegmentSize but in tests);
// a sealed segment drops its write buffer, and at most sealedSegmentFiles
// sealed segments are open at once (sealedSegments).
func openWAL(dir string, segmentSize int, log hclog.Logger) (*raftLogStore, error) {
	return openWALFiles(dir, segmentSize, sealedSegmentFiles, log)
}

// openWALFiles is openWAL keeping at most sealedFiles sealed segment files
// open.
func openWALFiles(dir string, segmentSize, sealedFiles int, log hclog.Logger) (*raftLogStore, error) {
	path := filepath.Join(dir, walDir)
	if err := makeDir(path); err != nil {
		return nil, fmt.Errorf("server: open raft log %s: %w", path, err)
	}
	lock, err := lockDir(path, storeLockTimeout)
	if err != nil {
		return nil, err
	}
	wlog := log.Named("raft-wal")
	reaper := newSegmentReaper(path, wlog)
	filer := segment.NewFiler(path, walfs.New())
	files := newSegmentFiles(filer, sealedFiles, wlog)
	w, err := wal.Open(path, wal.WithLogger(wlog), wal.WithSegmentSize(segmentSize),
		wal.WithSegmentFiler(sealedSegments{Filer: filer, log: wlog, files: files, reaper: reaper}))
	if err != nil {
		files.closeAll()
		reaper.close()
		return nil, errors.Join(fmt.Errorf("server: open raft log %s: %w", path, err), lock.Close())
	}
	return &raftLogStore{kind: RaftLogWAL, logs: w, stable: w, reaper: reaper, files: files, close: func() error {
		err := w.Close()
		files.closeAll()
		reaper.close()
		return errors.Join(err, lock.Close())
	}}, nil
}

// exists reports whether path exists.
func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: raft log: %w", err)
	}
	return true, nil
}
