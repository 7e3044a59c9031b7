package raftlog

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

// Kind names the store that keeps a node's Raft log and its stable state
// (current term, vote).
type Kind string

const (
	// WAL is hashicorp/raft-wal in the data directory's raft-wal/:
	// segment files written in append order, one fsync per batch of entries,
	// and a small bolt file (wal-meta.db) for the stable state and the list
	// of segments.
	WAL Kind = "wal"
	// Bolt is hashicorp/raft-boltdb in the data directory's raft.db:
	// a B+tree, two fdatasyncs per batch of entries.
	Bolt Kind = "bolt"
)

// The names of the two stores in a node's data directory.
const (
	BoltFile = "raft.db"
	WALDir   = "raft-wal"
)

// storeLockTimeout is how long opening a log store waits for another
// process (a node still stopping) to let go of it.
const storeLockTimeout = time.Second

var (
	// ErrUnknownKind is wrapped by the errors about a Kind value that names
	// no store.
	ErrUnknownKind = errors.New("raftlog: no such store")
	// ErrTwoStores is returned when a data directory holds both stores: a
	// node only ever writes one, so which is its log cannot be told.
	ErrTwoStores = errors.New("raftlog: the data directory holds both raft.db (raft-boltdb) and raft-wal/ (raft-wal)")
	// ErrInUse is returned when another process holds the store
	// open: two nodes on one data directory.
	ErrInUse = errors.New("raftlog: in use by another process")
)

// Parse returns the store s names ("wal" or "bolt").
func Parse(s string) (Kind, error) {
	switch l := Kind(s); l {
	case WAL, Bolt:
		return l, nil
	}
	return "", fmt.Errorf("%w: %q is neither %q nor %q", ErrUnknownKind, s, WAL, Bolt)
}

// Store is a node's Raft log and stable store, of either kind, open on
// its data directory, which it holds locked until Close.
type Store struct {
	kind   Kind
	logs   raft.LogStore
	stable raft.StableStore
	reaper *segmentReaper // raft-wal's: unlinks the segments it deleted
	files  *segmentFiles  // raft-wal's: its open sealed segment files
	close  func() error
}

// Kind returns which store this is: the data directory's, which may not be
// the one asked for (see Open).
func (s *Store) Kind() Kind { return s.kind }

// Logs returns the Raft log, for raft.NewRaft (through NewCache on a node).
// Its StoreLogs returns once the batch is durable.
func (s *Store) Logs() raft.LogStore { return s.logs }

// Stable returns the stable store: raft's term and vote, and what the node
// keeps beside them (its group's identity, its writable flag).
func (s *Store) Stable() raft.StableStore { return s.stable }

// Close closes the store's files and releases its lock.
func (s *Store) Close() error { return s.close() }

// pick returns the store dir holds, or want for a directory that
// holds none yet; found says whether it holds one. A directory holding
// both is refused.
func pick(dir string, want Kind) (kind Kind, found bool, err error) {
	bolt, err := exists(filepath.Join(dir, BoltFile))
	if err != nil {
		return "", false, err
	}
	wal, err := exists(filepath.Join(dir, WALDir))
	if err != nil {
		return "", false, err
	}
	switch {
	case bolt && wal:
		return "", false, fmt.Errorf("%w in %s: a node writes only one; move the other out of the directory before starting it",
			ErrTwoStores, dir)
	case bolt:
		return Bolt, true, nil
	case wal:
		return WAL, true, nil
	}
	return want, false, nil
}

// Open opens the Raft log store in the data directory dir: the one the
// directory already holds, else a new one of kind want. A directory
// holding both is refused (ErrTwoStores), and so is one another process
// holds open, after a second (ErrInUse). log is the node's: Open says
// which store it found, and raft-wal logs under it.
func Open(dir string, want Kind, log hclog.Logger) (*Store, error) {
	if _, err := Parse(string(want)); err != nil {
		return nil, err
	}
	kind, found, err := pick(dir, want)
	if err != nil {
		return nil, err
	}
	switch {
	case found && kind == Bolt && want == WAL:
		log.Info("raft log: raft-boltdb (data directory from an earlier version)")
	case found && kind != want:
		log.Info("raft log: the data directory's store, not the one configured for new directories", "raft-log", kind, "configured", want)
	}
	if kind == Bolt {
		return openBolt(dir)
	}
	return openWAL(dir, walSegmentSize, log)
}

func openBolt(dir string) (*Store, error) {
	b, err := raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(dir, BoltFile),
		// Without these, bolt rewrites its whole freelist on every commit.
		BoltOptions: &bbolt.Options{Timeout: storeLockTimeout, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrInUse, filepath.Join(dir, BoltFile))
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", filepath.Join(dir, BoltFile), err)
	}
	return &Store{kind: Bolt, logs: b, stable: b, close: b.Close}, nil
}

// openWAL opens (or creates) the raft-wal store in dir/raft-wal. raft-wal
// fsyncs every batch of entries before StoreLogs returns and commits the
// stable state in bolt with an fdatasync, as Raft requires; it takes no
// lock of its own that gives up, so the directory is locked here first.
// New segment files are segmentSize bytes (walSegmentSize but in tests);
// a sealed segment drops its write buffer, and at most sealedSegmentFiles
// sealed segments are open at once (sealedSegments).
func openWAL(dir string, segmentSize int, log hclog.Logger) (*Store, error) {
	return openWALFiles(dir, segmentSize, sealedSegmentFiles, log)
}

// openWALFiles is openWAL keeping at most sealedFiles sealed segment files
// open.
func openWALFiles(dir string, segmentSize, sealedFiles int, log hclog.Logger) (*Store, error) {
	path := filepath.Join(dir, WALDir)
	if err := makeDir(path); err != nil {
		return nil, fmt.Errorf("raftlog: open %s: %w", path, err)
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
		return nil, errors.Join(fmt.Errorf("raftlog: open %s: %w", path, err), lock.Close())
	}
	return &Store{kind: WAL, logs: w, stable: w, reaper: reaper, files: files, close: func() error {
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
		return false, fmt.Errorf("raftlog: %w", err)
	}
	return true, nil
}
