package fsm

import (
	"errors"
	"github.com/qmqgo/qmq/fsm/dedup"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// applyFire moves each named schedule entry that is due and not yet fired
// into the message log and its subject's consume log, appended at the
// fire's time (consumers and retention see it as new), or, for a retry,
// back to its group (see retry.go), and records it in its hour's dispatch
// log. Anything else in the command changes nothing:
// an entry fired already (a Fire proposed again after a leader change), not
// due at the proposer's time, or a reference naming no record.
func (f *FSM) applyFire(index uint64, c *Fire) *FireResult {
	now := f.st.stamp(c.Now)
	res := &FireResult{}
	must(0, f.store.sched.Flush())
	subjects := map[string]bool{}
	var appended []firedEntry // for the timeline
	for _, ref := range c.Refs {
		hour, off := delaywheel.SplitRef(ref)
		hs := f.st.hours[hour]
		if hs == nil {
			res.Passed++
			continue
		}
		fired := f.firedSet(hour, hs)
		if _, done := fired[off]; done || hs.pending == 0 {
			res.Passed++
			continue
		}
		rec, err := f.store.sched.ReadRecord(ref)
		at, m := rec.At, rec.Message
		if err != nil {
			if !badRef(err) {
				must(0, err)
			}
			res.Passed++ // not a record: the same bytes give every replica the same answer
			continue
		}
		if at > c.Now { // never early, by the proposer's clock
			res.Passed++
			continue
		}
		if m.Subject == retrySubject {
			must(0, f.store.sched.Dispatch(ref))
			fired[off] = struct{}{}
			hs.pending--
			if s := f.fireRetry(m); s != "" && !subjects[s] {
				subjects[s] = true
				res.Subjects = append(res.Subjects, s)
			}
			res.Fired++
			continue
		}
		sentIndex, sentAt := m.Index, m.AppendedAt
		m.Index, m.AppendedAt = index, now
		moff, size := must2(f.store.messages.Append(m))
		appended = append(appended, firedEntry{offset: moff, ref: ref, sentIndex: sentIndex, sentAt: sentAt, due: at, app: rec.App})
		f.store.index.Add(moff, dedup.HashID(m.ID))
		must(f.store.appendConsume(m.Subject, logs.ConsumeEntry{Offset: moff, Size: size, AppendedAt: now, TagMask: message.TagMask(m.Tags)}))
		must(0, f.store.sched.Dispatch(ref))
		fired[off] = struct{}{}
		hs.pending--
		untally(f.st.delayed, m.Subject)
		if rec.App != "" {
			untally(f.st.appDelayed, rec.App)
		}
		if !subjects[m.Subject] {
			subjects[m.Subject] = true
			res.Subjects = append(res.Subjects, m.Subject)
		}
		res.Fired++
	}
	if len(appended) > 0 && f.writesTimeline() {
		f.tlBuf = writeFired(f.store, index, now, appended, f.tlBuf)
	}
	return res
}

// badRef reports whether a read failed because the reference names no
// record (rather than because the disk failed). Records carry their own
// offset, so a reference into the middle of one (even of a message body
// shaped like a record) does not read.
func badRef(err error) bool {
	return errors.Is(err, logs.ErrCorrupt) || errors.Is(err, logs.ErrBeyondEnd) ||
		errors.Is(err, logs.ErrRetained) || errors.Is(err, logs.ErrRecordSize)
}
