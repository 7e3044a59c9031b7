package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// maxSubjects is limits.MaxSubjectsPerBrokerGroup; tests lower it.
var maxSubjects = limits.MaxSubjectsPerBrokerGroup

// checkNewSubject refuses a message whose subject would be one more than
// maxSubjects. The subject counts once a message of it is written (see
// useSubject): f.subjects must always equal what load rebuilds from the
// logs and the state, or replicas that restarted would decide otherwise.
func (f *FSM) checkNewSubject(subject string) error {
	if _, ok := f.subjects[subject]; ok || len(f.subjects) < maxSubjects {
		return nil
	}
	return fmt.Errorf("%w: the broker group holds %d subjects (at most %d)", ErrLimit, len(f.subjects), maxSubjects)
}

// useSubject counts subject once a message (or a delayed one) of it is
// written.
func (f *FSM) useSubject(subject string) { f.subjects[subject] = struct{}{} }

// applyAppend appends each message to the message log and its subject's
// consume log, unless its id was appended within the dedup window. A
// message due after the leader-stamped time goes to the schedule log
// instead; one due at or before it is an ordinary message.
func (f *FSM) applyAppend(index uint64, c *Append) *AppendResult {
	now := f.st.stamp(c.Now)
	f.dedup.Expire(now)
	f.delayedDedup.Expire(now)
	// Delayed is due after the proposer's clock, which may be behind the
	// state's (an earlier leader's clock ran ahead): it fires by the
	// proposer's clock, never early by it. But never into an hour the
	// state may have swept (see sweepHours), which lies a whole dedup
	// window behind the state's clock, or, swept by a shorter window
	// before the window grew, before its floor.
	scheduleAfter := max(c.Now, now-f.st.config.DedupWindow, f.st.config.dedupFloor)
	res := &AppendResult{Messages: make([]MessageResult, len(c.Messages))}
	var sent *sentRecord // who sent what, for the timeline: only when the Append says
	if c.Senders != nil {
		sent = &sentRecord{senders: c.Apps}
	}
	for i, m := range c.Messages {
		if err := CheckMessage(m); err != nil {
			res.Messages[i] = MessageResult{Status: Rejected, Offset: -1, Seq: -1, Err: err}
			continue
		}
		h := dedup.HashID(m.ID) // once: both windows and the schedule's journal key on it
		if off, dup := f.isDuplicate(m.ID, h, now); dup {
			res.Messages[i] = MessageResult{Status: Duplicate, Offset: off, Seq: -1}
			continue
		}
		if ref, dup := f.isDelayedDuplicate(m.ID, h, now); dup {
			res.Messages[i] = MessageResult{Status: Duplicate, Offset: -1, Seq: -1, Ref: ref}
			continue
		}
		if err := f.checkNewSubject(m.Subject); err != nil {
			res.Messages[i] = MessageResult{Status: Rejected, Offset: -1, Seq: -1, Err: err}
			continue
		}
		if m.DeliverAt > scheduleAfter {
			res.Messages[i] = f.schedule(index, now, m, h, c.sender(i))
			if sent != nil && res.Messages[i].Status == Scheduled {
				sent.sched = append(sent.sched, sentSched{sender: c.Senders[i], ref: res.Messages[i].Ref})
			}
			continue
		}
		m.DeliverAt = 0 // due already: delivered at once, like any message
		m.Index, m.AppendedAt = index, now
		off, size, err := f.store.messages.AppendWire(c.wire(i), index, now)
		must(0, err)
		f.store.index.Add(off, h)
		seq := must(f.store.appendConsume(m.Subject, logs.ConsumeEntry{Offset: off, Size: size, AppendedAt: now, TagMask: message.TagMask(m.Tags)}))
		f.dedup.AddHash(h, now, off)
		f.useSubject(m.Subject)
		res.Messages[i] = MessageResult{Status: Appended, Offset: off, Seq: seq}
		if sent != nil {
			sent.appended(c.Senders[i], off)
		}
	}
	if sent != nil && f.writesTimeline() && (len(sent.runs) > 0 || len(sent.sched) > 0) {
		f.tlBuf = sent.write(f.store, index, now, f.tlBuf)
	}
	return res // ApplyBatch runs retention next
}

// isDuplicate reports whether id, whose hash is h, was appended within the
// window before now, and where. The window holds fingerprints of hashes, and whole
// buckets of time; a hit is confirmed by reading that message, which must
// have id and have been appended within the window (its bucket may hold it
// a little longer). The window keeps no sizes: a hit is rare, a size per id
// is not.
func (f *FSM) isDuplicate(id string, h uint64, now int64) (int64, bool) {
	candidates := f.dedup.LookupHash(h)
	if len(candidates) == 0 {
		return 0, false
	}
	must(0, f.store.messages.Log().Flush())
	for _, off := range candidates {
		if prev := must(f.store.messages.ReadAt(off)); prev.ID == id && f.dedup.Within(prev.AppendedAt, now) {
			return off, true
		}
	}
	return 0, false
}
