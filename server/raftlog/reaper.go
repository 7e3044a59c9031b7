package raftlog

import (
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// reapSuffix marks a raft-wal segment file the log no longer holds, renamed
// to be unlinked later. raft-wal lists only files ending in ".wal".
const reapSuffix = ".reap"

// segmentReaper unlinks the segment files a compaction frees off raft-wal's
// write lock. raft-wal deletes them while it holds the lock every append
// takes, and unlinking a preallocated segment is slow: about 10 ms each for
// 16 MiB here (ext4 mounted with discard), so a compaction freeing 5–14
// segments stopped appends for 50–140 ms — the longest stalls of a
// fixed-rate run (docs/benchmarks.md). Under the lock a file is only
// renamed, which frees nothing; one goroutine unlinks the renamed files.
// A crash in between leaves renamed files, which the next open removes.
type segmentReaper struct {
	dir    string
	log    hclog.Logger
	unlink func(path string) error // os.Remove; tests slow it down

	mu      sync.Mutex
	pending []string // renamed, not yet unlinked
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closing sync.Once
}

// newSegmentReaper removes the files an earlier reaper renamed and did not
// get to, and starts reaping in dir.
func newSegmentReaper(dir string, log hclog.Logger) *segmentReaper {
	r := &segmentReaper{dir: dir, log: log, unlink: os.Remove,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if left, err := filepath.Glob(filepath.Join(dir, "*"+reapSuffix)); err == nil {
		r.pending = left
	}
	go r.run()
	r.kick()
	return r
}

// delete takes the segment file of baseIndex and id out of the log: it
// renames it, for the reaper to unlink.
func (r *segmentReaper) delete(baseIndex, id uint64) error {
	path := filepath.Join(r.dir, segment.FileName(types.SegmentInfo{BaseIndex: baseIndex, ID: id}))
	if err := os.Rename(path, path+reapSuffix); err != nil {
		return err
	}
	r.mu.Lock()
	r.pending = append(r.pending, path+reapSuffix)
	r.mu.Unlock()
	r.kick()
	return nil
}

func (r *segmentReaper) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *segmentReaper) run() {
	defer close(r.done)
	for {
		select {
		case <-r.wake:
		case <-r.stop:
			r.reap() // what was renamed before the close
			return
		}
		r.reap()
	}
}

// reap unlinks every renamed file.
func (r *segmentReaper) reap() {
	r.mu.Lock()
	paths := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, path := range paths {
		if err := r.unlink(path); err != nil && !os.IsNotExist(err) {
			r.log.Warn("removing a raft log segment the log no longer holds", "file", filepath.Base(path), "error", err)
		}
	}
}

// close unlinks what is left and stops the reaper; closing again does
// nothing.
func (r *segmentReaper) close() {
	r.closing.Do(func() { close(r.stop) })
	<-r.done
}
