package logs

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Files is a bounded cache of open segment files, shared by the logs of
// one store (Options.Files), so that the descriptors a store holds do not
// grow with its logs or their segments. A segment keeps its base, path and
// size in memory and takes its *os.File from the cache for each use:
// acquire opens the file on a miss, counts the user and moves the file to
// the front of its list; release uncounts it.
//
// Invariants:
//
//   - A file is closed only when nobody uses it: eviction takes idle files
//     (no users) only, and a segment removed (retention, TruncateTo) or
//     whose log closed is closed at once if idle, or by its last user's
//     release. Nobody gets a removed segment's file again: reads of it
//     report ErrRetained.
//   - Eviction prefers clean files (fsynced since their last write, or never
//     written). A dirty file is fsynced before it is closed; a failure of
//     that fsync becomes its log's sticky write error, returned by the log's
//     next Append, Flush or Sync, so a checkpoint never calls data durable
//     whose write-back failed. Fsyncs of one file are serialised
//     (segment.syncMu), so the writer's own fsync after an eviction's failed
//     one sees that failure.
//   - Unless the owner defers those fsyncs (DeferEvictionSyncs): a dirty
//     file is then closed as it is, and what makes it durable is the
//     owner's: its log's next Sync (which fsyncs the reopened file: an fsync
//     writes the file's pages whichever descriptor wrote them) or a
//     syncfs(2) of the whole file system.
//   - The bound is soft only while every cached file is in use: a use never
//     waits for a slot and never fails for want of one; the excess is closed
//     as soon as its users release it.
//
// Any goroutine may evict, readers included; the fsync of a dirty file is
// then done by that goroutine, outside the cache's mutex, with the file
// held so that nobody closes it meanwhile.
type Files struct {
	max int

	mu    sync.Mutex
	clean lru // files with no write since their last fsync, most recently used first
	dirty lru // files written since their last fsync
	open  atomic.Int64

	// fsync makes a file durable: (*os.File).Sync; tests replace it.
	fsync func(*os.File) error
	// deferSyncs: eviction closes dirty files without an fsync.
	deferSyncs bool
}

// maxEvictionSyncs bounds the dirty files one acquire fsyncs to make room;
// past it (a writer dirtying files as fast as they are synced) the bound
// is exceeded until the next release.
const maxEvictionSyncs = 4

// NewFiles returns a cache holding at most limit open files (at least 1)
// while some of them are idle.
func NewFiles(limit int) *Files {
	return &Files{max: max(limit, 1), fsync: (*os.File).Sync}
}

// DeferEvictionSyncs makes eviction close dirty files without an fsync,
// for an owner that makes them durable itself: through the logs' Sync, or
// with one syncfs(2) through a descriptor opened before the writes, which
// also reports the write-back errors of files closed since (Linux 5.8 and
// later). With many logs written in turn (a consume log per subject, more
// subjects than the cache holds) each append would otherwise wait for an
// fsync. Call it before the cache is used.
func (fs *Files) DeferEvictionSyncs() { fs.deferSyncs = true }

// InjectFsync makes the cache fsync files with fn instead of
// (*os.File).Sync: fault injection for the tests of the packages built
// on it (an fsync reporting a lost write-back), never set in production.
// Call it while nothing is fsynced through the cache.
func (fs *Files) InjectFsync(fn func(*os.File) error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.fsync = fn
}

// DefersEvictionSyncs reports whether DeferEvictionSyncs was called.
func (fs *Files) DefersEvictionSyncs() bool { return fs.deferSyncs }

// Max returns the most files the cache keeps open while some are idle.
func (fs *Files) Max() int { return fs.max }

// Open returns how many descriptors the cache holds now, those of removed
// segments still in use included.
func (fs *Files) Open() int { return int(fs.open.Load()) }

// errRemoved means a segment was removed (or its log closed) before it was
// acquired; readers report it as ErrRetained.
var errRemoved = errors.New("logs: segment removed")

// acquire returns s's file, opening it on a miss, and holds it until
// release. With write the caller is the log's writer about to change the
// file: it is dirty from now until its next fsync.
func (fs *Files) acquire(s *segment, write bool) (*os.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if s.removed.Load() {
		return nil, errRemoved
	}
	if s.f == nil {
		fs.makeRoom(fs.max - 1) // may drop the mutex while it fsyncs
		if s.removed.Load() {
			return nil, errRemoved
		}
		if s.f == nil {
			f, err := os.OpenFile(s.path, os.O_RDWR, 0)
			if err != nil {
				return nil, fmt.Errorf("logs: open segment: %w", err)
			}
			s.f = f
			fs.open.Add(1)
			fs.clean.pushFront(s)
		}
	}
	s.refs.Add(1)
	if write && !s.dirty {
		s.list.remove(s)
		s.dirty = true
		fs.dirty.pushFront(s)
	} else {
		s.list.moveToFront(s)
	}
	if write {
		s.gen++
	}
	return s.f, nil
}

// release ends a use of s's file begun by acquire. It takes the mutex only
// when it has something to close.
func (fs *Files) release(s *segment) {
	if s.refs.Add(-1) != 0 {
		return
	}
	if s.removed.Load() {
		fs.mu.Lock()
		fs.closeIfIdle(s)
		fs.mu.Unlock()
		return
	}
	if fs.open.Load() > int64(fs.max) {
		fs.mu.Lock()
		fs.makeRoom(fs.max)
		fs.mu.Unlock()
	}
}

// insert adds the file of a segment just opened or created, dirty if it was
// written (a new segment's header). The file stays cached when unused.
func (fs *Files) insert(s *segment, f *os.File, dirty bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.makeRoom(fs.max - 1)
	s.f = f
	s.dirty = dirty
	fs.open.Add(1)
	if dirty {
		fs.dirty.pushFront(s)
	} else {
		fs.clean.pushFront(s)
	}
}

// forget detaches s: nobody acquires it again, and its file is closed now
// if idle, else by its last user's release. The log's writer calls it
// before removing the file.
func (fs *Files) forget(s *segment) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s.removed.Store(true)
	s.list.remove(s)
	return fs.closeIfIdle(s)
}

// closeIfIdle closes s's file if it has one and nobody uses it. fs.mu is
// held. Dirtiness is the cached file's: a file reopened starts clean for
// the cache, while its log still knows it has writes to sync.
func (fs *Files) closeIfIdle(s *segment) error {
	if s.f == nil || s.refs.Load() != 0 {
		return nil
	}
	s.list.remove(s)
	err := s.f.Close()
	s.f, s.dirty = nil, false
	fs.open.Add(-1)
	return err
}

// makeRoom closes idle files, least recently used first, until at most
// limit are open: clean ones first, then dirty ones after an fsync (or
// without one, with deferSyncs). It
// gives up, leaving the bound exceeded, when every file is in use. fs.mu
// is held; fsyncs drop it meanwhile.
func (fs *Files) makeRoom(limit int) {
	for syncs := 0; fs.open.Load() > int64(limit); {
		if v := fs.clean.idleFromBack(); v != nil {
			if err := fs.closeIfIdle(v); err != nil {
				v.owner.fail(fmt.Errorf("logs: close %s: %w", v.path, err))
			}
			continue
		}
		v := fs.dirty.idleFromBack()
		if v != nil && fs.deferSyncs {
			if err := fs.closeIfIdle(v); err != nil {
				v.owner.fail(fmt.Errorf("logs: close %s: %w", v.path, err))
			}
			continue
		}
		if v == nil || syncs == maxEvictionSyncs {
			return
		}
		syncs++
		fs.syncForEviction(v)
	}
}

// syncForEviction fsyncs the idle dirty file of v so that it may be closed.
// It holds v meanwhile, so that nobody closes it, and drops fs.mu, so that
// other users do not wait for the fsync. A failure is v's log's sticky
// error; v is then clean as far as the cache is concerned: its log
// refuses further writes, and closing the file loses nothing more.
func (fs *Files) syncForEviction(v *segment) {
	v.refs.Add(1)
	gen, f := v.gen, v.f
	fs.mu.Unlock()
	v.syncMu.Lock()
	err := fs.fsync(f)
	if err != nil {
		v.owner.fail(fmt.Errorf("logs: sync %s before closing it: %w", v.path, err))
	}
	v.syncMu.Unlock()
	fs.mu.Lock()
	if err != nil || v.gen == gen {
		fs.markClean(v)
	}
	if v.refs.Add(-1) == 0 && v.removed.Load() {
		fs.closeIfIdle(v)
	}
}

// markClean records that s's file was fsynced after its last write. fs.mu
// is held.
func (fs *Files) markClean(s *segment) {
	if !s.dirty {
		return
	}
	s.dirty = false
	if s.list != nil {
		s.list.remove(s)
		fs.clean.pushFront(s)
	}
}

// sync fsyncs s's file, which the caller (its log's writer) holds, and
// marks it clean.
func (fs *Files) sync(s *segment, f *os.File) error {
	s.syncMu.Lock()
	err := fs.fsync(f)
	s.syncMu.Unlock()
	if err != nil {
		return err
	}
	fs.mu.Lock()
	fs.markClean(s)
	fs.mu.Unlock()
	return nil
}

// lru is a list of cached segments, most recently used at the front. The
// links live in the segments; Files.mu guards them.
type lru struct{ head, tail *segment }

func (q *lru) pushFront(s *segment) {
	s.list, s.prev, s.next = q, nil, q.head
	if q.head != nil {
		q.head.prev = s
	} else {
		q.tail = s
	}
	q.head = s
}

// remove unlinks s from q; q may be nil (s in no list).
func (q *lru) remove(s *segment) {
	if q == nil {
		return
	}
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		q.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		q.tail = s.prev
	}
	s.list, s.prev, s.next = nil, nil, nil
}

func (q *lru) moveToFront(s *segment) {
	if q.head == s {
		return
	}
	q.remove(s)
	q.pushFront(s)
}

// idleFromBack returns the least recently used segment nobody uses, or nil.
func (q *lru) idleFromBack() *segment {
	for s := q.tail; s != nil; s = s.prev {
		if s.refs.Load() == 0 {
			return s
		}
	}
	return nil
}
