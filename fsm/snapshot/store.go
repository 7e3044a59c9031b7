package snapshot

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/disk"
)

// Store is a raft.SnapshotStore that keeps a state machine's snapshots as
// a manifest plus hard links to the log segments, so taking a snapshot
// copies no data. Opening one (to send it to a follower) streams the
// segments' bytes. A snapshot received from a leader is kept as the raw
// stream. Each snapshot is a directory:
//
//	<id>/meta.json   raft's metadata
//	<id>/manifest    the manifest (linked snapshots)
//	<id>/files/…     hard links to the segments (linked snapshots; LinkPath)
//	<id>/stream      the whole stream (received snapshots)
//
// The store must be on the same file system as the state machine's
// directory.
//
// A snapshot being read (Open, until the reader is closed) is never
// removed: sending one to a slow follower may outlast several newer
// snapshots. It is removed once its last reader closes, if it is no longer
// among the newest retain.
type Store struct {
	dir    string
	retain int
	check  func(rel string) error
	log    hclog.Logger
	free   disk.Probe

	// mu orders Open's pinning of a snapshot against reap's choice of the
	// snapshots to remove.
	mu      sync.Mutex
	readers map[string]int // open readers, by snapshot id
}

// Option adjusts a Store.
type Option func(*Store)

// WithFreeSpace makes the store ask probe, not disk.Free, how much space is
// free before it receives a snapshot. A nil probe keeps disk.Free.
func WithFreeSpace(probe disk.Probe) Option {
	return func(s *Store) {
		if probe != nil {
			s.free = probe
		}
	}
}

var _ raft.SnapshotStore = (*Store)(nil)

const (
	metaFile     = "meta.json"
	manifestFile = "manifest"
	filesDir     = "files"
	streamFile   = "stream"
	tmpSuffix    = ".tmp"
	// reapSuffix marks a snapshot being removed: it ends in tmpSuffix, so
	// that List skips it and a restart removes what a crash left of it.
	reapSuffix = ".reap" + tmpSuffix
)

// NewStore opens the store in dir, keeping the newest retain snapshots (at
// least 1), and those being read. check knows the state machine's files:
// it fails, wrapping ErrBad, unless rel is the path of a file its
// snapshots may hold, and the store refuses a stream naming any other.
func NewStore(dir string, retain int, check func(rel string) error, logger hclog.Logger, opts ...Option) (*Store, error) {
	if retain < 1 {
		return nil, fmt.Errorf("snapshot: a store must retain at least 1 snapshot, not %d", retain)
	}
	if check == nil {
		return nil, errors.New("snapshot: a store needs a path check")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: create store: %w", err)
	}
	// Snapshots being written when the process stopped were never completed.
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix))
	for _, path := range leftovers {
		if err := os.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("snapshot: remove incomplete snapshot: %w", err)
		}
	}
	s := &Store{dir: dir, retain: retain, check: check, log: logger.Named("snapshots"), free: disk.Free, readers: map[string]int{}}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// Create starts a new snapshot. Its sink is a *Sink.
func (s *Store) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	id := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	dir := filepath.Join(s.dir, id+tmpSuffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("snapshot: create: %w", err)
	}
	return &Sink{store: s, dir: dir, meta: raft.SnapshotMeta{
		Version: version, ID: id, Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex,
	}}, nil
}

// List returns the newest retain snapshots, newest first. Older ones still
// being read are not listed.
func (s *Store) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	all, err := s.list()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return all[:min(len(all), s.retain)], nil
}

func (s *Store) list() ([]*raft.SnapshotMeta, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: list: %w", err)
	}
	var metas []*raft.SnapshotMeta
	for _, e := range entries {
		if !e.IsDir() || strings.HasSuffix(e.Name(), tmpSuffix) {
			continue
		}
		m, err := s.readMeta(e.Name())
		if err != nil {
			s.log.Warn("skipping unreadable snapshot", "id", e.Name(), "error", err)
			continue
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b *raft.SnapshotMeta) int {
		return -cmp.Or(cmp.Compare(a.Term, b.Term), cmp.Compare(a.Index, b.Index), cmp.Compare(a.ID, b.ID))
	})
	return metas, nil
}

func (s *Store) readMeta(id string) (*raft.SnapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, id, metaFile))
	if err != nil {
		return nil, err
	}
	var m raft.SnapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBad, id, err)
	}
	return &m, nil
}

// Open returns a snapshot's metadata and its stream. The snapshot is kept
// until the stream is closed.
func (s *Store) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if strings.ContainsAny(id, `/\`) || id == "." || id == ".." || strings.HasSuffix(id, tmpSuffix) {
		return nil, nil, fmt.Errorf("%w: snapshot id %q", ErrBad, id)
	}
	meta, err := s.pin(id)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: open: %w", err)
	}
	src, err := s.openStream(id)
	if err != nil {
		s.unpin(id)
		return nil, nil, err
	}
	return meta, &snapshotReader{ReadCloser: src, store: s, id: id}, nil
}

// pin reads snapshot id's metadata and counts one more reader of it. Under
// mu, reap either removed the snapshot before (its metadata is gone) or
// sees the reader and keeps it.
func (s *Store) pin(id string) (*raft.SnapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	meta, err := s.readMeta(id)
	if err != nil {
		return nil, err
	}
	s.readers[id]++
	return meta, nil
}

// unpin counts one reader of snapshot id fewer; the last one reaps.
func (s *Store) unpin(id string) {
	s.mu.Lock()
	s.readers[id]--
	last := s.readers[id] == 0
	if last {
		delete(s.readers, id)
	}
	s.mu.Unlock()
	if last {
		s.reap()
	}
}

// openStream opens the stream of snapshot id, which is pinned: its stream
// file if it was received, else a pipe fed by a goroutine that opens each
// linked file in turn.
func (s *Store) openStream(id string) (io.ReadCloser, error) {
	dir := filepath.Join(s.dir, id)
	if f, err := os.Open(filepath.Join(dir, streamFile)); err == nil {
		return f, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot: open: %w", err)
	}
	mb, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("snapshot: open: %w", err)
	}
	m, err := decodeManifest(mb, s.check)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(Write(pw, m, func(rel string) (io.ReadCloser, error) {
			return openLink(filepath.Join(dir, filesDir), rel)
		}))
	}()
	return &pipeStream{PipeReader: pr, done: done}, nil
}

// LinkPath is where a linked snapshot keeps the link to the file rel of
// its manifest under dir (the directory Sink.Adopt moves into the
// snapshot): in the directory the path's first element names, with the
// rest of the path folded into the name (schedule/2026113014/dispatched/X.seg
// is schedule/2026113014@dispatched@X.seg, consume/orders/X.seg is
// consume/orders@X.seg, messages/X.seg stays). A state machine links its
// files on its apply goroutine, where creating a directory costs far more
// than a link: a snapshot of thousands of hours or subjects then creates a
// handful of directories, not one each. No element of a path but the
// first may hold '@'.
func LinkPath(dir, rel string) string {
	first, rest, ok := strings.Cut(rel, "/")
	if !ok {
		return filepath.Join(dir, rel)
	}
	return filepath.Join(dir, first, strings.ReplaceAll(rest, "/", "@"))
}

// openLink opens the link to rel under dir: at LinkPath, or, in a snapshot
// stored before consume-log links were folded, at rel.
func openLink(dir, rel string) (io.ReadCloser, error) {
	f, err := os.Open(LinkPath(dir, rel))
	if errors.Is(err, os.ErrNotExist) && strings.Count(rel, "/") > 1 {
		if nested, nerr := os.Open(filepath.Join(dir, filepath.FromSlash(rel))); nerr == nil {
			return nested, nil
		}
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// pipeStream is the reading end of a linked snapshot's stream.
type pipeStream struct {
	*io.PipeReader
	done chan struct{} // closed when the writer goroutine has returned
}

// Close stops the writer, which fails its next write, and waits until it
// has returned, closing the file it was copying.
func (p *pipeStream) Close() error {
	p.PipeReader.Close()
	<-p.done
	return nil
}

// snapshotReader is a pinned snapshot's stream: closing it unpins the
// snapshot.
type snapshotReader struct {
	io.ReadCloser
	store *Store
	id    string
	once  sync.Once
	err   error
}

func (r *snapshotReader) Close() error {
	r.once.Do(func() {
		r.err = r.ReadCloser.Close()
		r.store.unpin(r.id)
	})
	return r.err
}

// reap removes all but the newest retain snapshots, except those being
// read. Under mu it renames each to a name List skips and Open refuses, so
// a snapshot is either whole and listed or on its way out; the removal
// itself runs outside the lock.
func (s *Store) reap() {
	s.mu.Lock()
	all, err := s.list()
	var doomed []string
	if err == nil {
		for _, m := range all[min(len(all), s.retain):] {
			if s.readers[m.ID] > 0 {
				continue
			}
			gone := filepath.Join(s.dir, m.ID+reapSuffix)
			if err := os.Rename(filepath.Join(s.dir, m.ID), gone); err != nil {
				s.log.Warn("removing old snapshot", "id", m.ID, "error", err)
				continue
			}
			doomed = append(doomed, gone)
		}
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("listing snapshots to reap", "error", err)
		return
	}
	for _, path := range doomed {
		if err := os.RemoveAll(path); err != nil {
			s.log.Warn("removing old snapshot", "path", path, "error", err)
		}
	}
}
