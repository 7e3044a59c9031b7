package raftlog

import (
	"container/list"
	"errors"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// sealedSegmentFiles is the most sealed segment files a raft-wal store
// keeps open at once. Raft reads its log forward, entry after entry: a
// leader's replication to each follower, a follower's apply, raft's reads
// of its last entries; each reader is in one segment (two where it crosses
// from one to the next), so a handful of readers hit open files, and 32
// leaves room for many more. A read that misses opens the file again (an
// open(2) and a pread of its 32-byte header, about as much again as the
// read; BenchmarkWALReadSealedSegment). 32 files of 16 MiB cover 512 MiB of
// log.
const sealedSegmentFiles = 32

// MaxFiles is the most descriptors a Store holds, what a node keeps room
// for besides its clients and its state machine: raft-boltdb holds one
// (raft.db), and raft-wal at most
//   - sealedSegmentFiles sealed segment files;
//   - the tail's file (a segment's writer is closed when it is sealed,
//     before the next one is created);
//   - the file of a tail cut from the log (a follower's conflicting
//     entries), which raft-wal closes once the read still holding the
//     state that named it ends, while the next tail is already written;
//   - the directory, which raft-wal opens to fsync it after a new
//     segment's first write (and at open, to list it);
//   - wal-meta.db (bolt), and the lock on raft-wal/ (lockDir).
const MaxFiles = sealedSegmentFiles + 5

// errSegmentClosed is returned by a read of a segment raft-wal has closed
// (it left the log, or the store closed).
var errSegmentClosed = errors.New("raftlog: segment closed")

// segmentFiles bounds the sealed segment files of one raft-wal store open
// at once. raft-wal keeps a reader for every segment in the log, and the
// reader it gets from the filer (sealedReader) keeps only the segment's
// info: a read takes the file from here, which opens it on a miss (as
// raft-wal does, with segment.Filer.Open, which checks its header) and
// keeps it, most recently used first, while fewer than max are open.
//
// Invariants:
//   - At most max files are open, those being opened included: a read that
//     needs a file when max are open closes the least recently used idle
//     one, and waits if none is idle (every open file is being read; a read
//     is a few preads, and holds nothing else the reads it waits for need).
//   - A file is closed only when nobody reads it: eviction takes idle files
//     only, and a segment closed by raft-wal while a read is under way is
//     closed by that read's release. A read holds no file after it returns:
//     the buffer it returns is a copy.
//   - One mutex, the cache's, guards every segment's file and the list.
//     No segment has a lock of its own, so a read evicting another
//     segment's file takes no other lock, and cannot deadlock with that
//     segment's reader evicting its own. Files are opened outside the
//     mutex, with their slot counted; idle read-only files are closed
//     under it (a close(2) of a file opened O_RDONLY writes nothing back).
type segmentFiles struct {
	filer *segment.Filer
	log   hclog.Logger
	max   int

	mu    sync.Mutex
	freed sync.Cond  // on mu: a file was released or closed, or an open ended
	count int        // files open or being opened
	lru   *list.List // *sealedReader with an open file, most recently used first
	shut  bool       // closeAll: no read gets a file again
	waits int        // reads that waited for a file: tests look
}

func newSegmentFiles(filer *segment.Filer, limit int, log hclog.Logger) *segmentFiles {
	fs := &segmentFiles{filer: filer, log: log, max: max(limit, 1), lru: list.New()}
	fs.freed.L = &fs.mu
	return fs
}

// sealedReader reads one sealed segment through its store's segmentFiles.
type sealedReader struct {
	files *segmentFiles
	info  types.SegmentInfo

	// Guarded by files.mu.
	r       types.SegmentReader // the open file; nil while closed
	elem    *list.Element       // in files.lru while r is set
	users   int                 // reads of r under way
	opening bool                // a read is opening the file
	closed  bool                // by raft-wal: no read gets the file again
}

// open returns a reader of the sealed segment info, whose file it opens
// now (so that a segment that cannot be read fails where raft-wal opens
// it) and keeps as the most recently used.
func (fs *segmentFiles) open(info types.SegmentInfo) (*sealedReader, error) {
	s := &sealedReader{files: fs, info: info}
	if _, err := fs.acquire(s); err != nil {
		return nil, err
	}
	fs.release(s)
	return s, nil
}

// opened returns how many files are open now.
func (fs *segmentFiles) opened() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.count
}

// GetLog implements types.SegmentReader.
func (s *sealedReader) GetLog(idx uint64) (*types.PooledBuffer, error) {
	r, err := s.files.acquire(s)
	if err != nil {
		return nil, err
	}
	defer s.files.release(s)
	return r.GetLog(idx)
}

// Close implements io.Closer: the file is closed now if idle, else when
// the read under way ends; reads after it get errSegmentClosed. Closing
// again does nothing.
func (s *sealedReader) Close() error {
	fs := s.files
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.users == 0 {
		return fs.closeFile(s)
	}
	return nil
}

// acquire returns s's file, opening it if it is closed, and holds it until
// release.
func (fs *segmentFiles) acquire(s *sealedReader) (types.SegmentReader, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for {
		switch {
		case s.closed || fs.shut:
			return nil, errSegmentClosed
		case s.r != nil:
			s.users++
			fs.lru.MoveToFront(s.elem)
			return s.r, nil
		case s.opening: // by another read: wait for it
		case fs.count < fs.max:
			return fs.openFile(s)
		default:
			if v := fs.idleFromBack(); v != nil {
				if err := fs.closeFile(v); err != nil {
					fs.log.Warn("closing an idle raft log segment", "segment", segment.FileName(v.info), "error", err)
				}
				continue
			}
		}
		fs.waits++
		fs.freed.Wait()
	}
}

// openFile opens s's file in a slot counted for it, outside fs.mu, and
// holds it. fs.mu is held.
func (fs *segmentFiles) openFile(s *sealedReader) (types.SegmentReader, error) {
	s.opening = true
	fs.count++
	fs.mu.Unlock()
	r, err := fs.filer.Open(s.info)
	fs.mu.Lock()
	s.opening = false
	fs.freed.Broadcast()
	if err != nil {
		fs.count--
		return nil, err
	}
	if s.closed || fs.shut { // while the file was opening
		fs.count--
		return nil, errors.Join(errSegmentClosed, r.Close())
	}
	s.r, s.users = r, s.users+1
	s.elem = fs.lru.PushFront(s)
	return r, nil
}

// release ends a read begun by acquire.
func (fs *segmentFiles) release(s *sealedReader) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	s.users--
	if s.users > 0 {
		return
	}
	if s.closed || fs.shut {
		if err := fs.closeFile(s); err != nil {
			fs.log.Warn("closing a raft log segment that left the log", "segment", segment.FileName(s.info), "error", err)
		}
	}
	fs.freed.Broadcast()
}

// closeFile closes s's file if it is open; nobody reads it. fs.mu is held.
func (fs *segmentFiles) closeFile(s *sealedReader) error {
	if s.r == nil {
		return nil
	}
	fs.lru.Remove(s.elem)
	err := s.r.Close()
	s.r, s.elem = nil, nil
	fs.count--
	fs.freed.Broadcast()
	return err
}

// idleFromBack returns the least recently used segment whose file nobody
// reads, or nil. fs.mu is held.
func (fs *segmentFiles) idleFromBack() *sealedReader {
	for e := fs.lru.Back(); e != nil; e = e.Prev() {
		if s := e.Value.(*sealedReader); s.users == 0 {
			return s
		}
	}
	return nil
}

// closeAll closes every file nobody reads and makes every segment refuse
// reads from now on (a file being read is closed by its read's release):
// for a store that closed, or whose open failed after it opened some
// segments, which raft-wal then leaves open.
func (fs *segmentFiles) closeAll() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.shut = true
	for e := fs.lru.Front(); e != nil; {
		s := e.Value.(*sealedReader)
		e = e.Next()
		s.closed = true
		if s.users == 0 {
			if err := fs.closeFile(s); err != nil {
				fs.log.Warn("closing a raft log segment", "segment", segment.FileName(s.info), "error", err)
			}
		}
	}
}
