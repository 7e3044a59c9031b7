package server

import (
	"sync/atomic"
	"time"
)

// applyTimes records, by Raft index, when this node's state machine began
// applying each of the last len(slots) entries, so that the proposer of an
// entry, once its future resolves, can tell its commit time
// (qmq_commit_seconds: from its proposal to the start of its apply) from
// its apply time (qmq_apply_seconds, observed on the apply goroutine).
//
// Why by index: hashicorp/raft's Log.AppendedAt, the one time an entry
// carries, is set when the leader loop dispatches the entry, after it
// waited in Raft's apply queue (a proposal waits there while the leader
// writes the previous ones), so measuring from it would leave that wait
// out; and the future, which knows its proposal's start, learns its index
// only once it resolves, after the apply. So the apply goroutine writes
// the start time into a fixed ring slot per entry (three atomic stores,
// no allocation, no lock) and the proposer looks its index up. A slot is
// overwritten after len(slots) more entries: a proposer that took that
// long to look observes nothing rather than a wrong time.
type applyTimes struct {
	base  time.Time // at is monotonic nanoseconds since base
	slots [1 << 12]struct {
		index atomic.Uint64 // 0 while the slot is being written
		at    atomic.Int64
	}
}

func newApplyTimes() *applyTimes { return &applyTimes{base: time.Now()} }

// record notes that entry index began to apply at t. Only the apply
// goroutine calls it.
func (a *applyTimes) record(index uint64, t time.Time) {
	s := &a.slots[index%uint64(len(a.slots))]
	s.index.Store(0)
	s.at.Store(int64(t.Sub(a.base)))
	s.index.Store(index)
}

// began returns when entry index began to apply, if its slot still holds it.
func (a *applyTimes) began(index uint64) (time.Time, bool) {
	if index == 0 {
		return time.Time{}, false
	}
	s := &a.slots[index%uint64(len(a.slots))]
	if s.index.Load() != index {
		return time.Time{}, false
	}
	at := s.at.Load()
	if s.index.Load() != index {
		return time.Time{}, false
	}
	return a.base.Add(time.Duration(at)), true
}
