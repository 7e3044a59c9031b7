package server

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/backup"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// RestoreConfig is how Restore seeds a new group from a backup file.
type RestoreConfig struct {
	// From is the backup file (qmqctl backup's --out).
	From string
	// DataDir is the new node's data directory: absent or empty.
	DataDir string
	// ID is the new node's id, and RaftAddr the Raft address the group
	// records for it: the --raft-advertise it will start with, else its
	// --raft.
	ID, RaftAddr string
	// Group, if set, must be the group the backup is of: a restored group
	// keeps its name (its state machine's identity names it, and its
	// brokers register with the metaserver under it).
	Group  string
	Logger hclog.Logger
}

// ErrRestore means a restore was refused; nothing was written.
var ErrRestore = errors.New("server: restore refused")

// raftTermKey is where hashicorp/raft's stable store keeps the current
// term (raft's keyCurrentTerm).
var raftTermKey = []byte("CurrentTerm")

// Restore verifies the backup file cfg.From completely, then seeds
// cfg.DataDir with its snapshot as the only one of a group whose one voter
// is cfg.ID at cfg.RaftAddr: the node then starts as usual (qmqd broker
// or qmqd meta with that data directory, id and Raft address), restores
// the snapshot into its state machine, elects itself, and others join it
// with qmqctl join. The Raft store gets the snapshot's term, so that the
// node's first term comes after it, as Raft's order of terms wants. The
// directory's contents are built in a directory inside cfg.DataDir, on the
// filesystem they will live on, and moved up into it once complete and
// durable: a restore that fails leaves nothing (cfg.DataDir, if it made
// it, is removed again).
func Restore(cfg RestoreConfig) (*backup.Header, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if err := fsm.CheckName("node id", cfg.ID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	if _, _, err := net.SplitHostPort(cfg.RaftAddr); err != nil {
		return nil, fmt.Errorf("%w: raft address %q: %w", ErrRestore, cfg.RaftAddr, err)
	}
	if err := checkEmptyDir(cfg.DataDir); err != nil {
		return nil, err
	}
	f, err := os.Open(cfg.From)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRestore, err)
	}
	defer f.Close()
	h, err := backup.Read(f, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrRestore, cfg.From, err)
	}
	if cfg.Group != "" && cfg.Group != h.Group {
		return nil, fmt.Errorf("%w: %s is a backup of group %s, not %s (a restored group keeps its name)", ErrRestore, cfg.From, h.Group, cfg.Group)
	}
	// The directory is built inside cfg.DataDir, on the filesystem the
	// node's data will live on (a data directory is often a mount point,
	// which cannot be renamed over), then moved up into it.
	created, err := makeDir(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("server: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(cfg.DataDir, ".restoring-")
	if err != nil {
		return nil, fmt.Errorf("server: restore: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
			if created {
				os.Remove(cfg.DataDir)
			}
		}
	}()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("server: restore: %w", err)
	}
	if err := seed(tmp, cfg, h, f); err != nil {
		return nil, fmt.Errorf("server: restore into %s: %w", cfg.DataDir, err)
	}
	if err := disk.SyncTree(tmp, disk.Dirs); err != nil {
		return nil, fmt.Errorf("server: restore: %w", err)
	}
	done = true // from here, what is moved stays: a restore cut short is refused as not empty
	if err := moveUp(tmp, cfg.DataDir); err != nil {
		return nil, fmt.Errorf("server: restore into %s (empty it before another restore): %w", cfg.DataDir, err)
	}
	cfg.Logger.Info("restored", "group", h.Group, "kind", backup.KindName(h.Kind), "snapshot", h.SnapshotID,
		"index", h.Index, "term", h.Term, "data", cfg.DataDir, "id", cfg.ID, "raft", cfg.RaftAddr)
	return h, nil
}

// seed writes the snapshot of the backup file f (read once more, checked
// again) into dir's snapshot store, with a configuration of one voter,
// and the snapshot's term into dir's Raft store, as a node of the
// backup's kind lays its data directory out.
func seed(dir string, cfg RestoreConfig, h *backup.Header, f io.Reader) error {
	var snaps raft.SnapshotStore
	var kind raftlog.Kind
	var err error
	switch h.Kind {
	case transport.BackupBroker:
		snaps, err = fsm.NewSnapshotStore(filepath.Join(dir, "snapshots"), 2, cfg.Logger)
		kind = DefaultConfig().RaftLog
	case transport.BackupMeta:
		snaps, err = raft.NewFileSnapshotStoreWithLogger(dir, 2, cfg.Logger.Named("snapshots"))
		kind = raftlog.Bolt
	default:
		err = fmt.Errorf("a backup of kind %d", h.Kind)
	}
	if err != nil {
		return err
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: raft.ServerAddress(cfg.RaftAddr)}}}
	// The store writes the legacy peer list through a transport's
	// encoding: an in-memory one at the node's address encodes it as
	// Raft's network transport does.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.RaftAddr))
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, h.Index, h.Term, conf, h.Index, trans)
	if err != nil {
		return err
	}
	// The stream is checked as the state machine will read it, as it is
	// written: a backup whose chunks are whole but whose snapshot would not
	// restore is refused here, not at the node's start.
	check, verdict := streamCheck(h.Kind)
	_, err = backup.Read(f, io.MultiWriter(check, sink))
	check.Close()
	// The check's verdict, unless the stream stopped for another reason
	// (the sink's write failed): a check that failed fails the write.
	if cerr := verdict(); cerr != nil && (err == nil || errors.Is(err, cerr)) {
		err = fmt.Errorf("%w: %s: %w", ErrRestore, cfg.From, cerr)
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	store, err := raftlog.Open(dir, kind, cfg.Logger)
	if err != nil {
		return err
	}
	err = store.Stable().SetUint64(raftTermKey, h.Term)
	return errors.Join(err, store.Close())
}

// checkEmptyDir refuses a data directory that holds anything.
func checkEmptyDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("%w: no data directory", ErrRestore)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("%w: %w", ErrRestore, err)
	case len(entries) > 0:
		return fmt.Errorf("%w: %s is not empty: a restore seeds a new node's data directory only "+
			"(one a restore cut short left holds .restoring-*, or its parts: empty it)", ErrRestore, dir)
	}
	return nil
}

// streamCheck checks a snapshot stream of kind as it is written to w: the
// state machine's own check (fsm.CheckSnapshot, meta.CheckSnapshot), which
// writes nothing. Close w at the stream's end; verdict then says what the
// check found, naming the byte of the stream where it failed. A write
// after the check failed fails with its error.
func streamCheck(kind byte) (w io.WriteCloser, verdict func() error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		cr := &countingReader{r: pr}
		var err error
		switch kind {
		case transport.BackupBroker:
			err = fsm.CheckSnapshot(cr)
		default:
			err = meta.CheckSnapshot(cr)
		}
		if err != nil {
			err = fmt.Errorf("the snapshot in it is corrupt at byte %d of its stream: %w", cr.n, err)
		}
		pr.CloseWithError(err)
		done <- err
	}()
	return pw, func() error { return <-done }
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// makeDir makes dir if it does not exist, and says whether it did.
func makeDir(dir string) (bool, error) {
	if _, err := os.Stat(dir); err == nil {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	return true, disk.SyncDir(filepath.Dir(filepath.Clean(dir)))
}

// moveUp moves every entry of tmp into dir, its parent, and removes tmp,
// fsyncing dir. The snapshots go last: a directory cut short by a crash
// before them holds no snapshot, on which a node does not start as a
// group of its own (and a restore refuses, as not empty).
func moveUp(tmp, dir string) error {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return err
	}
	last := func(e os.DirEntry) int {
		if e.Name() == "snapshots" {
			return 1
		}
		return 0
	}
	slices.SortFunc(entries, func(a, b os.DirEntry) int { return cmp.Compare(last(a), last(b)) })
	for _, e := range entries {
		if err := os.Rename(filepath.Join(tmp, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(tmp); err != nil {
		return err
	}
	return disk.SyncDir(dir)
}
