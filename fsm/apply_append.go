package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/logs"
)

// errDelayedNotYet refuses delayed messages until the state machine keeps a
// schedule log.
var errDelayedNotYet = fmt.Errorf("%w: delayed delivery is not available on this broker yet", ErrInvalid)

// applyAppend appends each message to the message log and its subject's
// consume log, unless its id was appended within the dedup window.
func (f *FSM) applyAppend(index uint64, c *Append) *AppendResult {
	now := f.st.stamp(c.Now)
	f.dedup.expire(now)
	res := &AppendResult{Messages: make([]MessageResult, len(c.Messages))}
	for i, m := range c.Messages {
		if err := CheckName("subject", m.Subject); err != nil {
			res.Messages[i] = MessageResult{Status: Rejected, Seq: -1, Err: err}
			continue
		}
		if m.DeliverAt != 0 {
			// Until the schedule log is part of this state machine, a delayed
			// message is refused rather than delivered at once.
			res.Messages[i] = MessageResult{Status: Rejected, Seq: -1, Err: errDelayedNotYet}
			continue
		}
		if off, dup := f.isDuplicate(m.ID); dup {
			res.Messages[i] = MessageResult{Status: Duplicate, Offset: off, Seq: -1}
			continue
		}
		m.Index, m.AppendedAt = index, now
		off, size, err := f.store.messages.Append(m)
		must(0, err)
		seq := must(f.store.appendConsume(m.Subject, logs.ConsumeEntry{Offset: off, Size: size, AppendedAt: now, TagMask: logs.TagMask(m.Tags)}))
		f.dedup.add(m.ID, now, seen{offset: off, size: size})
		res.Messages[i] = MessageResult{Status: Appended, Offset: off, Seq: seq}
	}
	return res // ApplyBatch runs retention next
}

// isDuplicate reports whether id was appended within the window, and where.
// The window holds hashes; a hit is confirmed by reading that message.
func (f *FSM) isDuplicate(id string) (int64, bool) {
	candidates := f.dedup.lookup(id)
	if len(candidates) == 0 {
		return 0, false
	}
	must(0, f.store.messages.Log().Flush())
	for _, s := range candidates {
		if prev := must(f.store.messages.Read(s.offset, s.size)); prev.ID == id {
			return s.offset, true
		}
	}
	return 0, false
}
