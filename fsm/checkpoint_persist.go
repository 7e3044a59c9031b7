package fsm

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
)

// pendingCheckpoint is a checkpoint a snapshot took on the apply
// goroutine, to be made durable off it: Snapshot only flushes the logs,
// encodes the state with the logs' ends and links the segments (a few
// milliseconds whatever the state's size), and Persist, on Raft's snapshot
// goroutine while applies go on, makes the logs durable up to those ends,
// then writes the checkpoint. The fsyncs of a checkpoint (one per log
// written since the last: hundreds of milliseconds with many subjects)
// then never stall an apply.
//
// Logs only append, so their bytes up to the ends stay as they were while
// the apply goroutine writes on; segments that retention removes meanwhile
// stay readable through the snapshot's links. A checkpoint only ever
// replaces an older one: one written meanwhile by retention (which writes
// its own, at once, before it removes anything) or by a Restore wins, and
// this one is dropped.
type pendingCheckpoint struct {
	encoded []byte
	index   uint64 // the applied index it records
	restore uint64 // FSM.restores when it was taken
	// What it makes removable, removed on the apply goroutine once it is
	// written (cleanAfterCheckpoint): the schedule hours emptied before it,
	// and the journal older than any dedup window at its time.
	hours         []int64
	journalBefore int64
}

// takeCheckpoint flushes the logs and returns the checkpoint of the
// current state with their ends, not yet durable. Apply goroutine only.
func (f *FSM) takeCheckpoint() (*pendingCheckpoint, *logEnds, error) {
	// A replica that stopped may hold half an entry (a write failed after
	// others succeeded): a checkpoint must never make that durable. Its
	// last checkpoint stands; a restart replays from there.
	if err := f.Stopped(); err != nil {
		return nil, nil, fmt.Errorf("%w: no checkpoint: %w", ErrStopped, err)
	}
	if err := f.store.flush(); err != nil {
		return nil, nil, f.checkpointFailed(err)
	}
	c := f.currentCheckpoint()
	p := &pendingCheckpoint{encoded: c.encode(), index: f.st.applied, restore: f.restores,
		hours:         slices.Clone(f.emptied),
		journalBefore: f.st.now - f.st.config.DedupWindow}
	f.checkpointSize = int64(len(p.encoded))
	return p, c.ends, nil
}

// persistCheckpoint makes p durable: the data it records first (syncData,
// through the snapshot's staging directory of links), then the checkpoint
// file, unless a newer checkpoint was written meanwhile. Any goroutine.
//
// A failure here is a storage failure and stops the replica (OnFatal), as
// a failed write in apply does: a sync's error may be the only report of
// a write-back lost since the last checkpoint (with eviction fsyncs
// deferred, a closed file's is reported to no one else, and to one sync
// only), so a replica that went on would record the lost bytes as durable
// at its next checkpoint. Raft retrying the snapshot later is no remedy.
func (f *FSM) persistCheckpoint(p *pendingCheckpoint, staging string) error {
	if err := f.syncCheckpoint(func() error { return f.syncData(staging) }); err != nil {
		return err
	}
	written, err := f.recordCheckpoint(p)
	if err != nil {
		return f.checkpointFailed(err)
	}
	if written {
		f.cleanup.Store(p)
	}
	return nil
}

// syncCheckpoint runs sync, which makes a checkpoint's data durable, under
// syncMu, then asks whether a log failed meanwhile (logsFailed: a write or
// a file cache's fsync that failed may have lost bytes below the ends),
// and stops the replica on a failure before it lets another checkpoint's
// sync run. Persist's and retention's syncs go through one descriptor of
// the FSM's directory, and a write-back error is reported to one syncfs
// only: two racing, one saw the error and the other passed, and retention
// wrote its checkpoint, recording the lost bytes as durable, before
// Persist had stopped the replica. Serialised, the one that passes finds
// the replica stopped. Any goroutine.
func (f *FSM) syncCheckpoint(sync func() error) error {
	if !f.syncMu.TryLock() {
		if f.syncWaits != nil {
			f.syncWaits()
		}
		f.syncMu.Lock()
	}
	defer f.syncMu.Unlock()
	err := sync()
	if err == nil {
		err = f.logsFailed()
	}
	if err != nil {
		return f.checkpointFailed(err)
	}
	return nil
}

// checkpointFailed stops the replica for a storage failure on the
// checkpoint path, unless it stopped already, and returns the error.
func (f *FSM) checkpointFailed(err error) error {
	if errors.Is(err, ErrStopped) || f.Stopped() != nil {
		return fmt.Errorf("fsm: checkpoint: %w", err)
	}
	err = fmt.Errorf("fsm: checkpoint: %w", err)
	f.stopApplying(err, true)
	return err
}

// recordCheckpoint writes p's checkpoint file, unless a newer checkpoint
// or a restored one stands, or the replica stopped since p's data was
// synced (another sync may have met a failure since), and reports whether
// it did. Any goroutine.
func (f *FSM) recordCheckpoint(p *pendingCheckpoint) (bool, error) {
	f.ckptMu.Lock()
	defer f.ckptMu.Unlock()
	if err := f.Stopped(); err != nil {
		return false, fmt.Errorf("%w: no checkpoint: %w", ErrStopped, err)
	}
	if p.restore != f.restores || p.index < f.ckptIndex {
		return false, nil
	}
	if err := writeFileAtomic(filepath.Join(f.cfg.Dir, dataDir), checkpointFile, p.encoded); err != nil {
		return false, err
	}
	f.ckptIndex = p.index
	return true, nil
}

// restoredSince reports whether a Restore replaced the state since p was
// taken. Any goroutine.
func (f *FSM) restoredSince(p *pendingCheckpoint) bool {
	f.ckptMu.Lock()
	defer f.ckptMu.Unlock()
	return p.restore != f.restores
}

// cleanAfterCheckpoint removes, on the apply goroutine, what the last
// checkpoint Persist wrote no longer needs (see cleanAfter).
func (f *FSM) cleanAfterCheckpoint() {
	if p := f.cleanup.Swap(nil); p != nil && p.restore == f.restores {
		f.cleanAfter(p)
	}
}

// cleanAfter removes what checkpoint p, written, no longer needs: the
// schedule hours emptied before it and the journal older than any dedup
// window at its time. Apply goroutine only.
func (f *FSM) cleanAfter(p *pendingCheckpoint) {
	f.removeEmptiedHours(p.hours)
	if err := f.store.journal.RemoveBefore(p.journalBefore); err != nil {
		f.log.Warn("trimming the journal", "error", err)
	}
}

// logsFailed returns why applying stopped, or a failure a log met outside
// its writer (the schedule's hours' included, and a failure to close one),
// or nil. Any goroutine.
func (f *FSM) logsFailed() error {
	if err := f.Stopped(); err != nil {
		return err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil
	}
	for _, l := range f.store.all() {
		if err := l.log.Failed(); err != nil {
			return err
		}
	}
	return f.store.sched.Failed()
}
