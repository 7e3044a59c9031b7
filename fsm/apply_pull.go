package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
)

// applyPull hands out entries to a consumer: first the group's redelivery
// queue, then from the group's cursor, recording each in the pull log. A
// pull of a subject without messages registers nothing, so names a client
// makes up cost no state; a new group or consumer past a limit of package
// limits is refused.
func (f *FSM) applyPull(c *Pull) any {
	if err := checkNames(c.Subject, c.Group, c.Consumer); err != nil {
		return err
	}
	if c.Max <= 0 {
		return fmt.Errorf("%w: pull of %d entries", ErrInvalid, c.Max)
	}
	cl := f.store.consumeLog(c.Subject)
	if cl == nil {
		f.st.stamp(c.Now)
		return &PullResult{}
	}
	gk, ck := groupKey{c.Subject, c.Group}, consumerKey{c.Subject, c.Group, c.Consumer}
	cs := f.st.byKey[ck]
	if cs == nil {
		if err := f.canRegister(gk); err != nil {
			return err
		}
	}
	f.st.stamp(c.Now)
	g := f.group(gk, cl)
	if cs == nil {
		cs = f.st.register(ck)
	}
	res := &PullResult{Epoch: cs.epoch}
	if c.Resend {
		from := c.From
		if c.Epoch != 0 && c.Epoch != cs.epoch {
			// It names an ended registration: it has received no reply of
			// this one (a consumer takes the epoch of the first reply it
			// gets), so whatever this one handed out, it never saw.
			from = 0
		}
		f.resend(cs, from, min(c.Max, f.cfg.MaxPull), res)
	}
	n := min(c.Max-len(res.Entries), f.cfg.MaxPull-len(res.Entries), f.cfg.MaxUnacked-cs.unacked())
	if n <= 0 {
		return res
	}
	start := f.firstRetained(c.Subject, cl)
	n += len(res.Entries)
	for len(res.Entries) < n && len(g.redeliver) > 0 {
		seq := g.redeliver[0]
		g.redeliver = g.redeliver[1:]
		if seq >= start { // older ones were removed by retention
			res.Entries = append(res.Entries, f.hand(cs, seq))
		}
	}
	g.cursor = max(g.cursor, start)
	for end := cl.NextSeq(); len(res.Entries) < n && g.cursor < end; g.cursor++ {
		res.Entries = append(res.Entries, f.hand(cs, g.cursor))
	}
	return res
}

// The limits of package limits on consumers and groups; tests lower them.
var (
	maxConsumers         = limits.MaxConsumers
	maxConsumersPerGroup = limits.MaxConsumersPerGroup
	maxGroups            = limits.MaxConsumerGroups
	maxGroupsPerSubject  = limits.MaxConsumerGroupsPerSubject
)

// canRegister reports whether a new consumer of group k may register: the
// limits on consumers, and on groups if k is new.
func (f *FSM) canRegister(k groupKey) error {
	g := f.st.groups[k]
	switch {
	case len(f.st.consumers) >= maxConsumers:
		return fmt.Errorf("%w: the broker group has %d consumers registered (at most %d)", ErrLimit, len(f.st.consumers), maxConsumers)
	case g != nil && g.consumers >= maxConsumersPerGroup:
		return fmt.Errorf("%w: consumer group %s of %s has %d consumers (at most %d)", ErrLimit, k.group, k.subject, g.consumers, maxConsumersPerGroup)
	case g == nil && f.st.groupsOf[k.subject] >= maxGroupsPerSubject:
		return fmt.Errorf("%w: subject %s has %d consumer groups (at most %d)", ErrLimit, k.subject, f.st.groupsOf[k.subject], maxGroupsPerSubject)
	case g == nil && len(f.st.groups) >= maxGroups:
		return fmt.Errorf("%w: the broker group has %d consumer groups (at most %d)", ErrLimit, len(f.st.groups), maxGroups)
	}
	return nil
}

// resend hands cs again the entries it holds unacked at or after pull
// sequence from, up to limit: the consumer asked from there, so it never
// received them. This makes a pull whose reply was lost harmless.
func (f *FSM) resend(cs *consumer, from int64, limit int, res *PullResult) {
	if from < 0 || from >= cs.next {
		return
	}
	for i := int(max(from-cs.ackPos, 0)); i < len(cs.window) && len(res.Entries) < limit; i++ {
		if p := cs.window[i]; !p.acked {
			res.Entries = append(res.Entries, Pulled{PullSeq: cs.ackPos + int64(i), ConsumeSeq: p.consumeSeq})
		}
	}
}

// firstRetained returns the first sequence of cl whose message is still in
// the message log. Retention removes consume-log entries a whole segment at
// a time, so the first entries of a consume log may point at messages that
// are gone; a pull must not hand those out. The answer only changes when
// retention removes messages, so it is cached per subject until then.
func (f *FSM) firstRetained(subject string, cl *logs.ConsumeLog) int64 {
	ms := f.store.messages.Log().Start()
	if ms == 0 {
		return cl.StartSeq()
	}
	if seq, ok := f.firstLive[subject]; ok {
		return seq
	}
	seq := must(cl.SeqAtOrAfter(ms))
	f.firstLive[subject] = seq
	return seq
}

// group returns the group's state, creating it at the start of the
// subject's consume log: a new group gets every retained message.
func (f *FSM) group(k groupKey, cl *logs.ConsumeLog) *group {
	if g := f.st.groups[k]; g != nil {
		return g
	}
	g := &group{cursor: cl.StartSeq()}
	f.st.addGroup(k, g)
	return g
}

// hand gives consume-log sequence seq to consumer cs as its next pull
// sequence. The pull log records the consumer by the low 32 bits of its
// epoch (the record's field is 32 bits; nothing reads it back but tools).
func (f *FSM) hand(cs *consumer, seq int64) Pulled {
	pos := must(f.store.pulls.Append(logs.PullEntry{Consumer: uint32(cs.epoch), PullSeq: cs.next, ConsumeSeq: seq}))
	cs.window = append(cs.window, pulled{consumeSeq: seq, pos: pos})
	p := Pulled{PullSeq: cs.next, ConsumeSeq: seq}
	cs.next++
	return p
}
