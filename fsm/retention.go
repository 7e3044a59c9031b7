package fsm

import (
	"fmt"
	"math"
	"slices"

	"github.com/qmqgo/qmq/logs"
)

// retain applies the retention policy at leader-stamped time now, so every
// replica removes the same segments: sealed message-log segments that are
// too old or too many bytes, then the consume-log entries pointing into
// them, then the pull-log segments no consumer still waits on.
func (f *FSM) retain(now int64) {
	r := f.st.config.retention()
	ml := f.store.messages
	if (r.MaxAge == 0 && r.MaxBytes == 0) || ml.Log().SegmentCount() < 2 {
		return
	}
	must(0, f.store.flush())
	keep := must(ml.RetainFrom(r, now))
	if keep <= ml.Log().Start() {
		return
	}
	// Removed segments cannot come back, so first make this state, with
	// the new start, the checkpoint: a restart must never return to a
	// checkpoint older than the removal (Open could not cut the logs back to
	// it), and Open finishes a removal that a crash interrupted.
	f.st.retainFrom, f.st.removing = keep, true
	f.retainBytes(keep)
	must2(f.writeCheckpoint())
	f.step("checkpoint")
	f.removeBefore(keep)
}

// removeBefore removes the message-log segments before keep, the
// consume-log entries pointing into them, drops from the groups what went
// with them (countRemoved) and removes the pull-log segments no unacked
// entry needs. It depends only on the logs and the state, and every
// removal is idempotent: run again on the state of retention's checkpoint
// (Open does, while the checkpoint says removing), it leaves the logs and
// the state as one uninterrupted run did, wherever the first run stopped.
func (f *FSM) removeBefore(keep int64) {
	ml := f.store.messages
	removed := must(ml.Log().RemoveBefore(keep))
	must(0, f.store.index.Retain())
	f.retainTimeline()
	f.dedup.ForgetBefore(ml.Log().Start())
	clear(f.firstLive)
	f.log.Debug("retention removed message-log segments", "segments", removed, "start", ml.Log().Start())
	f.step("messages")
	for _, subject := range f.store.subjects() {
		cl := f.store.consumeLog(subject)
		seq := must(cl.SeqAtOrAfter(ml.Log().Start()))
		must(cl.Log().RemoveBefore(seq * logs.ConsumeRecordSize))
		f.step("consume")
	}
	f.countRemoved()
	f.step("count")
	oldest := f.store.pulls.Log().Next() / logs.PullRecordSize
	for _, cs := range f.st.consumers {
		if len(cs.window) > 0 {
			oldest = min(oldest, cs.window[0].pos)
		}
	}
	must(f.store.pulls.Log().RemoveBefore(oldest * logs.PullRecordSize))
	f.step("pulls")
	f.st.removing = false
}

// retainBytes takes from each subject's stored bytes (subjectLog) those
// of the consume-log entries removeBefore(keep) will remove, read before
// anything is removed: the checkpoint retention writes next holds the
// counts as they will be after the removal, so that a removal Open
// finishes (on the logs as that checkpoint recorded them, wherever the
// first run stopped) leaves counts and logs agreeing, and removeBefore
// itself does not count. It reads the removed consume-log segments only:
// what it costs is proportional to what retention removes.
func (f *FSM) retainBytes(keep int64) {
	start := f.store.messages.Log().KeptFrom(keep) // the message log's start after the removal
	f.store.mu.RLock()
	defer f.store.mu.RUnlock()
	for _, sl := range f.store.consume { // a map: each subject alone
		cl := sl.cl
		seq := must(cl.SeqAtOrAfter(start))
		cut := cl.Log().KeptFrom(seq*logs.ConsumeRecordSize) / logs.ConsumeRecordSize
		sl.bytes -= must(entryBytes(cl, cl.StartSeq(), cut))
	}
}

// entryBytes sums the Size of the consume-log entries from sequence from
// to before to, reading them a run at a time.
func entryBytes(cl *logs.ConsumeLog, from, to int64) (int64, error) {
	const run = 4096
	var sum int64
	for seq := from; seq < to; seq += run {
		es, err := cl.GetRange(seq, int(min(run, to-seq)))
		if err != nil {
			return 0, err
		}
		for _, e := range es {
			sum += int64(e.Size)
		}
	}
	return sum, nil
}

// countStoredBytes counts every subject's stored bytes from its consume
// log, for a checkpoint that does not record them (before version 7):
// once, at the first Open of such a checkpoint, reading every retained
// entry (40 bytes of consume log per message stored); every later
// checkpoint records them.
func (f *FSM) countStoredBytes() error {
	for _, sl := range f.store.consume { // a map: each subject alone; Open only
		n, err := entryBytes(sl.cl, sl.cl.StartSeq(), sl.cl.EndSeq())
		if err != nil {
			return fmt.Errorf("fsm: count the bytes stored per subject: %w", err)
		}
		sl.bytes = n
	}
	return nil
}

// finishRemoval makes, on open, the removal and adjustments of retention's
// checkpoint cp (removing), or of a checkpoint of an earlier version whose
// removal left message-log segments behind: a node that stopped anywhere
// between that checkpoint and the next then holds what one that never
// stopped holds. A storage failure is returned.
func (f *FSM) finishRemoval(cp *checkpoint) (err error) {
	if !cp.st.removing && f.store.messages.Log().Start() >= cp.st.retainFrom {
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			sf, ok := r.(storageFailure)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("fsm: finishing retention's removal: %w", sf.err)
		}
	}()
	f.log.Info("finishing retention's removal", "retain-from", cp.st.retainFrom, "applied-index", cp.st.applied)
	f.removeBefore(cp.st.retainFrom)
	return nil
}

// step tells the test hook retentionStep, if any, that a step of a
// retention removal completed.
func (f *FSM) step(name string) {
	if f.retentionStep != nil {
		f.retentionStep(name)
	}
}

// countRemoved drops from every group what retention removed before the
// group finished it (entries its cursor had not reached, entries due again,
// dead letters), counting each as lost, so that a group behind retention
// sees how many messages it never got.
func (f *FSM) countRemoved() {
	for k, g := range f.st.groups {
		cl := f.store.consumeLog(k.subject)
		if cl == nil {
			continue
		}
		start := f.firstRetained(k.subject, cl)
		f.skipRemoved(g, start)
		g.redeliver = slices.DeleteFunc(g.redeliver, func(r redelivery) bool {
			if r.seq < start {
				g.lost++
				return true
			}
			return false
		})
		before := len(g.dead)
		g.dead = slices.DeleteFunc(g.dead, func(d deadLetter) bool {
			if d.seq < start {
				g.lost++
				return true
			}
			return false
		})
		f.st.recountDead(g, before, false)
	}
}

// retainTimeline removes the timeline's segments that hold events of
// removed messages only. Every event of a message is recorded at or after
// its append time, so a segment whose successor starts before the first
// retained message was appended holds only events of earlier messages,
// all removed: a retained message's timeline is kept whole (but a delayed
// message's sent record, written when it was scheduled, may go before it
// fires; its timeline then says who sent it from the fired record, without
// the address). It depends only on the logs, like the rest of removeBefore.
func (f *FSM) retainTimeline() {
	ml, tl := f.store.messages.Log(), f.store.timeline
	since := int64(math.MaxInt64) // no message left: every record is older than the next one
	if start := ml.Start(); start < ml.End() {
		since = must(f.store.messages.ReadAt(start)).AppendedAt
	}
	segs := tl.Segments()
	cut := segs[0].Base
	for i := 1; i < len(segs) && segs[i].Base < tl.End(); i++ {
		// A read that fails stops the replica, as for every log; a record
		// that reads but does not decode (none apply writes) keeps what
		// follows: never removed by mistake.
		rec, err := decodeTimelineRecord(must(tl.Read(segs[i].Base)))
		if err != nil || rec.at >= since {
			break
		}
		cut = segs[i].Base
	}
	if cut > segs[0].Base {
		must(tl.RemoveBefore(cut))
		must(0, f.store.tlIndex.Retain())
	}
}
