package raftlog

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// walSegmentSize is the size of a raft-wal segment file: 16 MiB, where
// raft-wal's default is 64 MiB. A segment's writer keeps a write buffer as
// large as the largest batch appended to it (rounded up to a power of two)
// for as long as it is the log's tail; a batch that does not fit what is
// left of the segment seals it (sealedSegments then lets the buffer go),
// so the buffer a node keeps between bursts is at most one segment. The
// price is a rotation (a commit of wal-meta.db and a new preallocated file)
// every 16 MiB of log instead of every 64 MiB, and four times as many
// files, each held open while its entries are in the log.
const walSegmentSize = 16 << 20

// sealedSegments is raft-wal's segment filer, except that
//   - a segment lets go of its writer (and the writer's buffer) as soon as
//     it is sealed, and is read from then on through a read-only reader of
//     the file, as raft-wal reads the sealed segments it finds when it
//     opens. raft-wal itself keeps the writer of every sealed segment, with
//     its buffer, until the segment leaves the log;
//   - a sealed segment's file is open only while it is among the
//     sealedSegmentFiles most recently read (segmentFiles), where raft-wal
//     keeps every segment's file open while its entries are in the log: a
//     descriptor per segment, hundreds of them in a long log;
//   - Delete renames the file for the reaper (segmentReaper).
type sealedSegments struct {
	*segment.Filer
	log    hclog.Logger
	files  *segmentFiles
	reaper *segmentReaper
}

// Delete implements types.SegmentFiler: the file is renamed under
// raft-wal's write lock and unlinked after it (see segmentReaper). raft-wal
// deletes a segment after closing its reader; a rename needs no
// descriptor, and one still open reads the file renamed.
func (f sealedSegments) Delete(baseIndex, id uint64) error { return f.reaper.delete(baseIndex, id) }

// Open implements types.SegmentFiler: raft-wal opens every sealed segment
// it finds when it opens, each kept open only while among the most
// recently read.
func (f sealedSegments) Open(info types.SegmentInfo) (types.SegmentReader, error) {
	return f.files.open(info)
}

// Create implements types.SegmentFiler.
func (f sealedSegments) Create(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.Filer.Create(info)
	if err != nil {
		return nil, err
	}
	return &tailSegment{files: f.files, log: f.log, info: info, w: w}, nil
}

// RecoverTail implements types.SegmentFiler.
func (f sealedSegments) RecoverTail(info types.SegmentInfo) (types.SegmentWriter, error) {
	w, err := f.Filer.RecoverTail(info)
	if err != nil {
		return nil, err
	}
	return &tailSegment{files: f.files, log: f.log, info: info, w: w}, nil
}

// tailSegment is a segment created as the log's tail: written through
// raft-wal's writer until it is sealed, then read as a sealed segment,
// through segmentFiles. raft-wal calls Append, ForceSeal and Sealed from
// one writer at a time, and GetLog, LastIndex and Close from any goroutine.
type tailSegment struct {
	files *segmentFiles
	log   hclog.Logger
	info  types.SegmentInfo

	// mu guards the switch from w to r: readers hold it shared, the switch
	// exclusively, so the writer's file is closed with no read under way.
	// A read holds it while it waits for a sealed file (segmentFiles), which
	// no one waits for with a segment's mu held.
	mu     sync.RWMutex
	w      types.SegmentWriter // nil once sealed and reopened
	r      *sealedReader       // the sealed file, once w is nil
	closed bool
	// indexStart and last are the sealed segment's index offset and last
	// entry, once w is nil.
	indexStart, last uint64
}

// Append implements types.SegmentWriter.
func (s *tailSegment) Append(entries []types.LogEntry) error {
	w := s.writer()
	if w == nil {
		return types.ErrSealed
	}
	if err := w.Append(entries); err != nil {
		return err
	}
	if sealed, indexStart, err := w.Sealed(); err == nil && sealed {
		s.release(w, indexStart)
	}
	return nil
}

// ForceSeal implements types.SegmentWriter.
func (s *tailSegment) ForceSeal() (uint64, error) {
	w := s.writer()
	if w == nil {
		return s.indexStart, nil
	}
	indexStart, err := w.ForceSeal()
	if err != nil {
		return 0, err
	}
	s.release(w, indexStart)
	return indexStart, nil
}

// Sealed implements types.SegmentWriter.
func (s *tailSegment) Sealed() (bool, uint64, error) {
	if w := s.writer(); w != nil {
		return w.Sealed()
	}
	return true, s.indexStart, nil
}

// LastIndex implements types.SegmentWriter.
func (s *tailSegment) LastIndex() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.w != nil {
		return s.w.LastIndex()
	}
	return s.last
}

// GetLog implements types.SegmentReader.
func (s *tailSegment) GetLog(idx uint64) (*types.PooledBuffer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closed:
		return nil, errSegmentClosed
	case s.w != nil:
		return s.w.GetLog(idx)
	}
	return s.r.GetLog(idx)
}

// Close implements io.Closer; closing again does nothing.
func (s *tailSegment) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.w != nil {
		return s.w.Close()
	}
	return s.r.Close()
}

// writer returns the writer, nil once sealed.
func (s *tailSegment) writer() types.SegmentWriter {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.w
}

// release opens the sealed segment read-only, through segmentFiles, and
// drops w, its writer. If the file cannot be opened the writer stays (its
// buffer and its descriptor with it, outside MaxFiles) and reads go on
// through it.
func (s *tailSegment) release(w types.SegmentWriter, indexStart uint64) {
	info := s.info
	info.IndexStart, info.MaxIndex, info.SealTime = indexStart, w.LastIndex(), time.Now()
	r, err := s.files.open(info)
	if err != nil {
		s.log.Warn("sealed segment kept open for writing", "segment", segment.FileName(s.info), "error", err)
		return
	}
	s.mu.Lock()
	if s.closed { // and w with it
		s.mu.Unlock()
		r.Close()
		return
	}
	s.w, s.r, s.indexStart, s.last = nil, r, indexStart, info.MaxIndex
	s.mu.Unlock()
	if err := w.Close(); err != nil {
		s.log.Warn("closing a sealed segment's writer", "segment", segment.FileName(s.info), "error", err)
	}
}
