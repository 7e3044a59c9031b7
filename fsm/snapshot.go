package fsm

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/disk"
)

// The snapshot stream's format and the store that keeps snapshots are
// package snapshot's. The FSM tells them which files a snapshot may hold
// (checkSnapPath), and reports the package's errors and reserve as its
// own.
var (
	// ErrBadSnapshot means a snapshot is malformed, fails a checksum, or
	// holds data that does not open (snapshot.ErrBad).
	ErrBadSnapshot = snapshot.ErrBad
	// ErrNoSpace means the disk has too little space free for a snapshot
	// (snapshot.ErrNoSpace).
	ErrNoSpace = snapshot.ErrNoSpace
)

// SpaceReserve is the space a snapshot being received or restored must
// leave free (snapshot.SpaceReserve), and Config.DiskReserve's default.
const SpaceReserve = snapshot.SpaceReserve

// CheckSnapshot reads a snapshot's stream from r to its end and checks it
// as Restore would before it swaps anything in: its manifest and paths,
// every file's checksum, and its checkpoint's encoding. It writes
// nothing: qmqd restore runs it on a backup before a node starts on it.
func CheckSnapshot(r io.Reader) error {
	m, err := snapshot.ReadHead(r, checkSnapPath)
	if err != nil {
		return fmt.Errorf("fsm: check snapshot: %w", err)
	}
	err = snapshot.ReadFiles(r, m, func(string) (io.WriteCloser, error) { return discardFile{}, nil })
	if err == nil {
		_, err = decodeCheckpoint(m.Checkpoint)
	}
	if err == nil {
		if n, _ := io.Copy(io.Discard, r); n > 0 {
			err = fmt.Errorf("%w: %d bytes after the last file", ErrBadSnapshot, n)
		}
	}
	if err != nil {
		return fmt.Errorf("fsm: check snapshot: %w", err)
	}
	return nil
}

type discardFile struct{}

func (discardFile) Write(p []byte) (int, error) { return len(p), nil }
func (discardFile) Close() error                { return nil }

// NewSnapshotStore opens the store of this FSM's snapshots in dir, keeping
// the newest retain (at least 1) and those being read (snapshot.NewStore).
// It must be on the file system of the FSM's directory.
func NewSnapshotStore(dir string, retain int, logger hclog.Logger, opts ...snapshot.Option) (*snapshot.Store, error) {
	return snapshot.NewStore(dir, retain, checkSnapPath, logger, opts...)
}

// checkSnapPath accepts only messages/X.seg, pull/X.seg, journal/X.seg, timeline/X.seg,
// consume/SUBJECT/X.seg, schedule/HOUR/X.seg and
// schedule/HOUR/dispatched/X.seg: a stream cannot write anywhere else.
func checkSnapPath(rel string) error {
	parts := strings.Split(rel, "/")
	ok := path.Clean(rel) == rel && strings.HasSuffix(rel, ".seg")
	switch {
	case !ok:
	case len(parts) == 2 && (parts[0] == messagesDir || parts[0] == pullDir || parts[0] == journalDir || parts[0] == timelineDir):
	case len(parts) == 3 && parts[0] == scheduleDir && delaywheel.IsHourName(parts[1]):
	case len(parts) == 4 && parts[0] == scheduleDir && delaywheel.IsHourName(parts[1]) && parts[2] == "dispatched":
	case len(parts) == 3 && parts[0] == consumeDir && CheckName("subject", parts[1]) == nil:
	default:
		ok = false
	}
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".."
	}
	if !ok {
		return fmt.Errorf("%w: file path %q", ErrBadSnapshot, rel)
	}
	return nil
}

// Snapshot flushes the logs, takes the checkpoint (the state and the logs'
// ends) and hard-links every segment into a staging directory: no data is
// copied, and the segments' bytes up to the recorded sizes never change
// (logs only append, and recovery never cuts below a checkpoint), so the
// snapshot stays valid while the logs grow. Raft calls it on the FSM
// goroutine; the fsyncs that make the checkpoint durable, and its write,
// wait for Persist, off that goroutine (see pendingCheckpoint).
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	pending, ends, err := f.takeCheckpoint()
	if err != nil {
		return nil, err
	}
	files, err := f.snapshotFiles(ends)
	if err != nil {
		return nil, err
	}
	staging := filepath.Join(f.cfg.Dir, stagingDir, strconv.FormatUint(f.snapshot.Add(1), 10))
	m := &snapshot.Manifest{Checkpoint: pending.encoded}
	made := map[string]bool{}
	for _, seg := range files {
		dst := snapshot.LinkPath(staging, seg.rel)
		if dir := filepath.Dir(dst); !made[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				os.RemoveAll(staging)
				return nil, fmt.Errorf("fsm: snapshot: %w", err)
			}
			made[dir] = true
		}
		if err := os.Link(seg.path, dst); err != nil {
			os.RemoveAll(staging)
			return nil, fmt.Errorf("fsm: snapshot: %w", err)
		}
		m.Files = append(m.Files, snapshot.File{Rel: seg.rel, Size: seg.size})
	}
	f.log.Debug("snapshot", "applied-index", f.st.applied, "files", len(m.Files))
	return &fsmSnapshot{fsm: f, dir: staging, manifest: m, pending: pending}, nil
}

// segmentFile is one segment in a snapshot: its path in the store, its
// path relative to the store's directory, and its size then.
type segmentFile struct {
	path, rel string
	size      int64
}

// snapshotFiles lists every segment a snapshot holds: those of the logs,
// and those of the schedule's hours, up to the checkpoint's ends.
func (f *FSM) snapshotFiles(ends *logEnds) ([]segmentFile, error) {
	var out []segmentFile
	for _, nl := range f.store.all() {
		if nl.rel == timelineDir && ends.timeline == 0 {
			// An empty timeline (a group below version 2 writes none) is
			// not listed: a replica of the release before version gates
			// refuses a snapshot naming timeline/ (its checkSnapPath), and
			// a restore opens the log empty.
			continue
		}
		for _, seg := range nl.log.Segments() {
			out = append(out, segmentFile{path: seg.Path, rel: filepath.ToSlash(filepath.Join(nl.rel, filepath.Base(seg.Path))), size: seg.FileSize})
		}
	}
	for _, hour := range slices.Sorted(maps.Keys(ends.hours)) {
		segs, err := f.store.sched.Files(hour, ends.hours[hour])
		if err != nil {
			return nil, fmt.Errorf("fsm: snapshot: %w", err)
		}
		for _, seg := range segs {
			out = append(out, segmentFile{path: filepath.Join(f.store.dir, scheduleDir, seg.Path), rel: filepath.ToSlash(filepath.Join(scheduleDir, seg.Path)), size: seg.FileSize})
		}
	}
	return out, nil
}

// writeCheckpoint makes the logs durable and then records the state and
// the logs' ends in the checkpoint, at once, on the apply goroutine (as
// retention must before it removes segments), and returns it with those
// ends. Once it is written, the schedule hours emptied before it are
// removed, and the journal drops what is older than any dedup window.
func (f *FSM) writeCheckpoint() ([]byte, *logEnds, error) {
	p, ends, err := f.takeCheckpoint()
	if err != nil {
		return nil, nil, err
	}
	if err := f.syncCheckpoint(f.syncLogs); err != nil {
		return nil, nil, err
	}
	if _, err := f.recordCheckpoint(p); err != nil {
		return nil, nil, err
	}
	f.cleanAfter(p)
	return p.encoded, ends, nil
}

// fsmSnapshot is a snapshot waiting to be persisted.
type fsmSnapshot struct {
	fsm      *FSM
	dir      string // hard links to the segments, each at snapshot.LinkPath
	manifest *snapshot.Manifest
	pending  *pendingCheckpoint
}

// ErrSnapshotSuperseded fails the Persist of a snapshot taken before a
// Restore replaced the state: it is of data the replica no longer holds.
var ErrSnapshotSuperseded = errors.New("fsm: snapshot superseded by a restore")

// Persist makes the snapshot's checkpoint durable (see pendingCheckpoint),
// then hands the links to a snapshot store's sink (no copy), or streams
// the whole snapshot into any other sink.
//
// A snapshot taken before a Restore and persisted after it fails with
// ErrSnapshotSuperseded (its checkpoint is dropped, as any older one is),
// so that Raft does not record it: hashicorp/raft records a persisted
// snapshot's index as its last one without comparing it with the one a
// restore recorded meanwhile (hashicorp/raft#248), and a follower's own
// snapshot, taken as a leader's arrived, put its last index back below the
// snapshot it had just installed. It then refused every entry after that
// snapshot as past its log, and stopped catching up. Raft, whose snapshot
// waits on its main loop while that installs a snapshot, persists it
// after the restore whenever the two meet.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	err := s.fsm.persistCheckpoint(s.pending, s.dir)
	if err == nil && s.fsm.restoredSince(s.pending) {
		err = ErrSnapshotSuperseded
	}
	if err == nil {
		if ls, ok := sink.(*snapshot.Sink); ok {
			err = ls.Adopt(s.dir, s.manifest)
		} else {
			err = snapshot.Write(sink, s.manifest, s.open)
		}
	}
	if err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) open(rel string) (io.ReadCloser, error) {
	f, err := os.Open(snapshot.LinkPath(s.dir, rel))
	if err != nil {
		return nil, fmt.Errorf("fsm: snapshot: %w", err)
	}
	return f, nil
}

// Release removes the staging links (gone already if a store adopted them).
func (s *fsmSnapshot) Release() { os.RemoveAll(s.dir) }

// Restore replaces the FSM's state with a snapshot streamed from a leader.
// The files are written and fsynced beside the current data, then swapped
// in by rename; a crash in between is finished by Open. It refuses with
// ErrNoSpace, before writing anything, when the disk has no room for the
// files and SpaceReserve.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := snapshot.ReadHead(rc, checkSnapPath)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	return f.restore(m, rc)
}

// restore is Restore once the stream's manifest m has been read from r.
func (f *FSM) restore(m *snapshot.Manifest, r io.Reader) error {
	tmp := filepath.Join(f.cfg.Dir, restoreDir)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	err := f.checkRestoreSpace(m)
	if err == nil {
		err = snapshot.ReadFiles(r, m, func(rel string) (io.WriteCloser, error) { return createSynced(tmp, rel) })
	}
	if err == nil {
		var c *checkpoint
		if c, err = decodeCheckpoint(m.Checkpoint); err == nil {
			err = f.checkVersion(c.st) // a group past this build: refused, as Open would
		}
	}
	if err == nil {
		err = syncTree(tmp)
	}
	if err == nil {
		// Open the restored logs where they are first: a snapshot that cannot
		// be opened is refused while the current state is still intact.
		err = f.tryLoad(tmp, m.Checkpoint)
	}
	if err == nil {
		// The checkpoint is written last: its presence marks the restore complete.
		err = writeFileAtomic(tmp, checkpointFile, m.Checkpoint)
	}
	if err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("fsm: restore: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	// No checkpoint a snapshot took before may be written from here on,
	// into the data this replaces or the data it brings.
	f.ckptMu.Lock()
	defer f.ckptMu.Unlock()
	f.restores++
	if err := f.store.close(); err != nil {
		f.log.Warn("closing logs before restore", "error", err)
	}
	// From here on a failure stops the replica rather than reopen the data
	// it had: that is only its last checkpoint, and Raft keeps the applied
	// index it had reached, so the entries applied since would never be
	// applied again. On restart Open completes the swap (the restore
	// directory is complete) and Raft goes on from the snapshot.
	data, old := filepath.Join(f.cfg.Dir, dataDir), filepath.Join(f.cfg.Dir, oldDir)
	if err := f.rename(data, old); err != nil {
		return f.swapFailed(err)
	}
	if err := f.rename(tmp, data); err != nil {
		if rerr := f.rename(old, data); rerr != nil {
			err = fmt.Errorf("%w, and putting the old data back: %w", err, rerr)
		}
		return f.swapFailed(err)
	}
	if err := os.RemoveAll(old); err != nil {
		f.log.Warn("removing the data a restore replaced", "error", err)
	}
	if err := f.load(data); err != nil {
		// The same files opened a moment ago: the disk is failing. On
		// restart Open finds the restored data in place.
		return f.swapFailed(fmt.Errorf("reopening restored data: %w", err))
	}
	f.ckptIndex = f.st.applied
	f.log.Info("restored snapshot", "applied-index", f.st.applied, "files", len(m.Files))
	return nil
}

// checkRestoreSpace checks that the FSM's disk can take the files of m
// beside the live data, and the reserve.
func (f *FSM) checkRestoreSpace(m *snapshot.Manifest) error {
	size := m.FilesSize()
	what := fmt.Sprintf("restoring a snapshot (its %d bytes of files and a %d-byte reserve)", size, SpaceReserve)
	return snapshot.CheckFree(f.cfg.DiskFree, f.log, f.cfg.Dir, size+SpaceReserve, what)
}

// syncedFile is a file that is fsynced when closed.
type syncedFile struct{ *os.File }

func (f syncedFile) Close() error {
	if err := f.Sync(); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

func createSynced(dir, rel string) (io.WriteCloser, error) {
	path := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return syncedFile{f}, nil
}

// syncTree fsyncs every directory under dir, so that the files created
// there survive a power loss.
func syncTree(dir string) error { return disk.SyncTree(dir, disk.Dirs) }

// CatchUp restores the newest snapshot in store if it is ahead of the FSM.
// Call it before starting Raft with NoSnapshotRestoreOnStart: Raft resumes
// applying after its newest snapshot, so a snapshot received from a leader
// whose Restore did not finish (a crash, a failed write) would otherwise
// leave a gap of entries that are never applied.
//
// Ahead means that the applied index its own checkpoint records (the first
// part of its manifest) is past the FSM's, not Raft's index of it: that
// one also counts the entries that never reach the state machine
// (barriers, no-ops, configuration changes), so a node's own newest
// snapshot is usually a few entries ahead of its checkpoint, and taking
// that for being behind copied all the node's data at every start, or
// refused to start on a disk without room for a second copy.
func (f *FSM) CatchUp(store raft.SnapshotStore) error {
	metas, err := store.List()
	if err != nil {
		return fmt.Errorf("fsm: list snapshots: %w", err)
	}
	if len(metas) == 0 || metas[0].Index <= f.Applied() {
		return nil
	}
	meta, rc, err := store.Open(metas[0].ID)
	if err != nil {
		return fmt.Errorf("fsm: open snapshot %s: %w", metas[0].ID, err)
	}
	defer rc.Close()
	m, err := snapshot.ReadHead(rc, checkSnapPath)
	if err != nil {
		return fmt.Errorf("fsm: snapshot %s: %w", meta.ID, err)
	}
	c, err := decodeCheckpoint(m.Checkpoint)
	if err != nil {
		return fmt.Errorf("fsm: snapshot %s: %w", meta.ID, err)
	}
	if c.st.applied <= f.Applied() {
		f.log.Debug("newest snapshot holds nothing newer", "applied-index", f.Applied(),
			"snapshot-index", meta.Index, "snapshot-applied-index", c.st.applied)
		return nil
	}
	f.log.Warn("state machine is behind its newest snapshot: restoring it",
		"applied-index", f.Applied(), "snapshot-index", meta.Index, "snapshot-applied-index", c.st.applied)
	return f.restore(m, rc)
}

// tryLoad opens the store in dir with checkpoint cp as load would, checks
// that every schedule hour the checkpoint names has its files up to its
// ends (hours are otherwise opened only when used), and closes it again.
func (f *FSM) tryLoad(dir string, cp []byte) error {
	c, err := decodeCheckpoint(cp)
	if err != nil {
		return err
	}
	f.adoptNodeConfig(c)
	s, err := openStore(dir, f.storeConfig(c.st.config.BrokerConfig), c.ends, f.syncfs)
	if err != nil {
		return err
	}
	defer s.close()
	if _, _, err := rebuildDedup(s, c); err != nil {
		return err
	}
	for hour, ends := range c.ends.hours {
		if _, err := s.sched.Files(hour, ends); err != nil {
			return fmt.Errorf("%w: schedule hour %s: %w", ErrBadSnapshot, delaywheel.HourName(hour), err)
		}
	}
	return nil
}

// swapFailed stops the replica for good after a restore's directory swap
// failed, with the logs closed, and returns the error.
func (f *FSM) swapFailed(err error) error {
	err = fmt.Errorf("fsm: restore: swapping in the restored data (the node must restart; Open completes the swap): %w", err)
	f.stopApplying(err, true)
	return err
}
