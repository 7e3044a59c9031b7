package fsm

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

// SnapshotStore is a raft.SnapshotStore that keeps this FSM's snapshots as
// a manifest plus hard links to the log segments, so taking a snapshot
// copies no data. Opening one (to send it to a follower) streams the
// segments' bytes. A snapshot received from a leader is kept as the raw
// stream. Each snapshot is a directory:
//
//	<id>/meta.json   raft's metadata
//	<id>/manifest    the manifest (linked snapshots)
//	<id>/files/…     hard links to the segments (linked snapshots)
//	<id>/stream      the whole stream (received snapshots)
//
// The store must be on the same file system as the FSM's directory.
//
// A snapshot being read (Open, until the reader is closed) is never
// removed: sending one to a slow follower may outlast several newer
// snapshots. It is removed once its last reader closes, if it is no longer
// among the newest retain.
type SnapshotStore struct {
	dir    string
	retain int
	log    hclog.Logger
	free   disk.Probe

	// mu orders Open's pinning of a snapshot against reap's choice of the
	// snapshots to remove.
	mu      sync.Mutex
	readers map[string]int // open readers, by snapshot id
}

// StoreOption adjusts a SnapshotStore.
type StoreOption func(*SnapshotStore)

// WithFreeSpace makes the store ask probe, not disk.Free, how much space is
// free before it receives a snapshot. A nil probe keeps disk.Free.
func WithFreeSpace(probe disk.Probe) StoreOption {
	return func(s *SnapshotStore) {
		if probe != nil {
			s.free = probe
		}
	}
}

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

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

// NewSnapshotStore opens the store in dir, keeping the newest retain
// snapshots (at least 1), and those being read.
func NewSnapshotStore(dir string, retain int, logger hclog.Logger, opts ...StoreOption) (*SnapshotStore, error) {
	if retain < 1 {
		return nil, fmt.Errorf("fsm: snapshot store must retain at least 1 snapshot, not %d", retain)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: create snapshot store: %w", err)
	}
	// Snapshots being written when the process stopped were never completed.
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix))
	for _, path := range leftovers {
		if err := os.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("fsm: remove incomplete snapshot: %w", err)
		}
	}
	s := &SnapshotStore{dir: dir, retain: retain, log: logger.Named("snapshots"), free: disk.Free, readers: map[string]int{}}
	for _, opt := range opts {
		opt(s)
	}
	return s, nil
}

// Create starts a new snapshot.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	id := fmt.Sprintf("%d-%d-%d", term, index, time.Now().UnixMilli())
	dir := filepath.Join(s.dir, id+tmpSuffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: create snapshot: %w", err)
	}
	return &linkSink{store: s, dir: dir, meta: raft.SnapshotMeta{
		Version: version, ID: id, Index: index, Term: term,
		Configuration: configuration, ConfigurationIndex: configurationIndex,
	}}, nil
}

// List returns the newest retain snapshots, newest first. Older ones still
// being read are not listed.
func (s *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	all, err := s.list()
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return all[:min(len(all), s.retain)], nil
}

func (s *SnapshotStore) list() ([]*raft.SnapshotMeta, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("fsm: list snapshots: %w", err)
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

func (s *SnapshotStore) readMeta(id string) (*raft.SnapshotMeta, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, id, metaFile))
	if err != nil {
		return nil, err
	}
	var m raft.SnapshotMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSnapshot, id, err)
	}
	return &m, nil
}

// Open returns a snapshot's metadata and its stream. The snapshot is kept
// until the stream is closed.
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if strings.ContainsAny(id, `/\`) || id == "." || id == ".." || strings.HasSuffix(id, tmpSuffix) {
		return nil, nil, fmt.Errorf("%w: snapshot id %q", ErrBadSnapshot, id)
	}
	meta, err := s.pin(id)
	if err != nil {
		return nil, nil, fmt.Errorf("fsm: open snapshot: %w", err)
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
func (s *SnapshotStore) pin(id string) (*raft.SnapshotMeta, error) {
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
func (s *SnapshotStore) unpin(id string) {
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
func (s *SnapshotStore) openStream(id string) (io.ReadCloser, error) {
	dir := filepath.Join(s.dir, id)
	if f, err := os.Open(filepath.Join(dir, streamFile)); err == nil {
		return f, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fsm: open snapshot: %w", err)
	}
	mb, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("fsm: open snapshot: %w", err)
	}
	m, err := decodeManifest(mb)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pw.CloseWithError(writeStream(pw, m, func(rel string) (io.ReadCloser, error) {
			return openStaged(filepath.Join(dir, filesDir), rel)
		}))
	}()
	return &pipeStream{PipeReader: pr, done: done}, nil
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
	store *SnapshotStore
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
func (s *SnapshotStore) reap() {
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

// linkSink receives one snapshot: either the FSM hands it its staging links
// (adopt), or raft writes a stream received from a leader (Write).
type linkSink struct {
	store  *SnapshotStore
	dir    string // <id>.tmp until Close
	meta   raft.SnapshotMeta
	stream *os.File
	done   bool
	// head collects the stream's header and manifest as they arrive;
	// manifestLen is the manifest's length once the header is in.
	head        []byte
	manifestLen int
	sized       bool  // the manifest arrived and the disk has room
	err         error // why the snapshot was abandoned
}

func (k *linkSink) ID() string { return k.meta.ID }

// Write appends to the raw stream. As soon as the stream's manifest has
// arrived it checks that the disk has room to keep the stream and restore
// it; if not, or if the head is malformed, it abandons the snapshot and
// fails with ErrNoSpace or ErrBadSnapshot.
func (k *linkSink) Write(p []byte) (int, error) {
	if k.err != nil {
		return 0, k.err
	}
	if k.done {
		return 0, fmt.Errorf("fsm: snapshot %s: write after close", k.meta.ID)
	}
	if !k.sized {
		if err := k.takeHead(p); err != nil {
			k.abandon(err)
			return 0, err
		}
	}
	if k.stream == nil {
		f, err := os.Create(filepath.Join(k.dir, streamFile))
		if err != nil {
			return 0, fmt.Errorf("fsm: snapshot stream: %w", err)
		}
		k.stream = f
	}
	n, err := k.stream.Write(p)
	k.meta.Size += int64(n)
	return n, err
}

// takeHead adds what p holds of the stream's header and manifest to
// k.head; once the manifest is whole, it checks the free space.
func (k *linkSink) takeHead(p []byte) error {
	for !k.sized && len(p) > 0 {
		want := headerSize
		if len(k.head) >= headerSize {
			want += k.manifestLen + 4
		}
		take := min(len(p), want-len(k.head))
		k.head, p = append(k.head, p[:take]...), p[take:]
		switch {
		case len(k.head) < want:
		case want == headerSize:
			n, err := checkHeader(k.head)
			if err != nil {
				return fmt.Errorf("fsm: receive snapshot %s: %w", k.meta.ID, err)
			}
			k.manifestLen = n
		default:
			m, err := checkManifest(k.head[headerSize:])
			if err != nil {
				return fmt.Errorf("fsm: receive snapshot %s: %w", k.meta.ID, err)
			}
			k.head, k.sized = nil, true
			return k.store.checkSpace(k.meta.ID, streamSize(m))
		}
	}
	return nil
}

// abandon removes what the sink received, and makes it fail from now on.
func (k *linkSink) abandon(err error) {
	k.err = err
	if k.stream != nil {
		k.stream.Close()
		k.stream = nil
	}
	if rerr := os.RemoveAll(k.dir); rerr != nil {
		k.store.log.Warn("removing a refused snapshot", "id", k.meta.ID, "error", rerr)
	}
}

// adopt moves the FSM's staging links into the snapshot.
func (k *linkSink) adopt(staging string, m *manifest) error {
	if err := os.Rename(staging, filepath.Join(k.dir, filesDir)); err != nil {
		return fmt.Errorf("fsm: adopt snapshot links: %w", err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, manifestFile), m.encode(), 0o644); err != nil {
		return fmt.Errorf("fsm: write snapshot manifest: %w", err)
	}
	k.meta.Size = streamSize(m)
	return nil
}

// Close completes the snapshot durably and reaps old ones.
func (k *linkSink) Close() error {
	if k.err != nil {
		return k.err
	}
	if k.done {
		return nil
	}
	k.done = true
	if k.stream != nil {
		err := k.stream.Sync()
		if cerr := k.stream.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.RemoveAll(k.dir)
			return fmt.Errorf("fsm: snapshot stream: %w", err)
		}
	}
	mb, err := json.Marshal(&k.meta)
	if err == nil {
		err = writeFileAtomic(k.dir, metaFile, mb)
	}
	if err == nil {
		err = syncTree(k.dir)
	}
	final := strings.TrimSuffix(k.dir, tmpSuffix)
	if err == nil {
		err = os.Rename(k.dir, final)
	}
	if err == nil {
		err = syncDir(k.store.dir)
	}
	if err != nil {
		os.RemoveAll(k.dir)
		return fmt.Errorf("fsm: complete snapshot: %w", err)
	}
	k.store.reap()
	return nil
}

// Cancel abandons the snapshot.
func (k *linkSink) Cancel() error {
	if k.done || k.err != nil {
		return nil
	}
	k.done = true
	if k.stream != nil {
		k.stream.Close()
	}
	return os.RemoveAll(k.dir)
}

// Receiving a snapshot writes it twice: the SnapshotStore keeps the stream
// as it arrives, then Restore writes each of its files beside the live data
// before swapping them in (the live data stays until the swap). Both check
// the free space first and refuse with ErrNoSpace rather than fill the disk
// halfway: the store, once the stream's manifest has arrived, wants twice
// the stream's size free; Restore wants the files' total size. Both want
// SpaceReserve on top.

// SpaceReserve is the space a snapshot being received or restored must
// leave free, for the logs and Raft to go on writing meanwhile: 64 MiB.
const SpaceReserve = 64 << 20

// ErrNoSpace means the disk has too little space free for a snapshot.
var ErrNoSpace = errors.New("fsm: not enough disk space")

// checkFree asks probe for the space free at dir and fails with ErrNoSpace
// if it is below need; what describes the write, for the error. A probe
// that fails is logged and the check passes: the write itself still fails
// if the disk fills.
func checkFree(probe disk.Probe, log hclog.Logger, dir string, need int64, what string) error {
	free, err := probe(dir)
	if err != nil {
		log.Warn("cannot tell the free disk space", "path", dir, "for", what, "error", err)
		return nil
	}
	if free < need {
		return fmt.Errorf("%w: %s needs %d bytes free in %s, %d are", ErrNoSpace, what, need, dir, free)
	}
	return nil
}

// checkSpace checks that the store's disk can take a received stream of
// size bytes and its restore: twice its size and the reserve.
func (s *SnapshotStore) checkSpace(id string, size int64) error {
	what := fmt.Sprintf("receiving snapshot %s (twice its %d bytes and a %d-byte reserve)", id, size, SpaceReserve)
	return checkFree(s.free, s.log, s.dir, 2*size+SpaceReserve, what)
}
