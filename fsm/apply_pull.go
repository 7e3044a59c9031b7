package fsm

import (
	"fmt"
	"slices"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// applyPull hands out entries to a consumer: first those its reply never
// reached (with Resend), then the group's redelivery queue, then from the
// group's cursor (only those matching the pull's tags, if it names any),
// recording each in the pull log, while their messages fit in MaxBytes. A
// pull registers its consumer, and its group if new, even before the
// subject has messages: a new group starting at the latest message must
// receive the first one. A new group or consumer past a limit of package
// limits is refused.
func (f *FSM) applyPull(c *Pull) any {
	if err := checkNames(c.Subject, c.ConsumerGroup, c.Consumer); err != nil {
		return err
	}
	if c.Max <= 0 {
		return fmt.Errorf("%w: pull of %d entries", ErrInvalid, c.Max)
	}
	if err := c.checkOptions(); err != nil {
		return err
	}
	gk, ck := groupKey{c.Subject, c.ConsumerGroup}, consumerKey{c.Subject, c.ConsumerGroup, c.Consumer}
	cs := f.st.byKey[ck]
	if cs == nil {
		if err := f.canRegister(gk, c); err != nil {
			return err
		}
	}
	cl := f.store.consumeLog(c.Subject)
	if cl == nil && c.legacy() {
		// Before version 3 a pull of a subject without messages registered
		// nothing; a replica must apply an old command as old ones did.
		f.st.stamp(c.Now)
		return &PullResult{}
	}
	now := f.st.stamp(c.Now)
	g := f.st.groups[gk]
	if g == nil {
		settings := DefaultConsumerGroupSettings()
		settings.IdleExpiry = c.IdleExpiry
		g = f.newGroup(gk, cl, c.Start, c.StartAt, settings)
		g.app = c.App
	}
	if cs == nil {
		cs = f.st.register(ck, c.App)
	}
	res := &PullResult{Epoch: cs.epoch}
	if cl == nil {
		return res
	}
	start := f.firstRetained(c.Subject, cl)
	b := &pullBound{max: c.MaxBytes}
	res.Located = b.bounded()
	if c.Resend {
		from := c.From
		if c.Epoch != 0 && c.Epoch != cs.epoch {
			// It names an ended registration: it has received no reply of
			// this one (a consumer takes the epoch of the first reply it
			// gets), so whatever this one handed out, it never saw.
			from = 0
		}
		f.resend(cl, cs, from, min(c.Max, f.st.config.MaxPull), start, b, res)
	}
	n := min(c.Max-len(res.Entries), f.st.config.MaxPull-len(res.Entries),
		g.settings.inFlight(f.st.config.MaxUnacked)-cs.open, f.st.config.MaxUnacked-len(cs.window))
	if n <= 0 || b.full {
		return b.result(res)
	}
	h := handing{cs: cs, now: now, ackWait: g.settings.AckWait, atMostOnce: c.AtMostOnce}
	f.tl.on(now, c.Subject, c.ConsumerGroup, c.Consumer, "")
	n += len(res.Entries)
	filter := newTagFilter(c.Tags, c.TagsAll)
	if filter != nil {
		f.flushUnread(cl) // the filter reads entries this batch appended
	} else {
		// Room for what it may hand out, at once.
		most := int64(len(res.Entries)+len(g.redeliver)) + max(cl.NextSeq()-g.cursor, 0)
		res.Entries = slices.Grow(res.Entries, int(min(int64(n), most))-len(res.Entries))
	}
	var check *tagFilter // what redeliveries must match: from version 4 on
	if c.pullVersion() >= commandVersionPull4 {
		check = filter
	}
	f.handRedeliveries(cl, g, h, start, n, check, b, res)
	f.skipRemoved(g, start)
	read := consumeReader{f: f, cl: cl}
	scanned := 0
	for end := cl.NextSeq(); len(res.Entries) < n && g.cursor < end && !b.full; g.cursor++ {
		var e logs.ConsumeEntry
		if filter != nil {
			if scanned == maxTagScan {
				res.More = true
				break
			}
			e = read.entry(g.cursor, min(end, g.cursor+int64(maxTagScan-scanned)))
			scanned++
			if !filter.matches(f, e) {
				continue // consumed, for this group
			}
		} else if b.bounded() {
			e = read.entry(g.cursor, min(end, g.cursor+int64(n-len(res.Entries))))
		}
		if !b.take(e.Size) {
			break
		}
		res.Entries = append(res.Entries, f.hand(h, redelivery{seq: g.cursor}, e))
	}
	if c.AtMostOnce {
		cs.advance()
	}
	return b.result(res)
}

// handRedeliveries hands out the group's redelivery queue, in order, up to
// n entries in all, dropping those retention removed (below start) as
// lost. With check, an entry that does not match it stays for another
// consumer of the group, moved to the end of the queue so that the next
// pull looks at others first; at most maxRedeliveryTagScan are looked at
// (such entries stay in the queue until a consumer whose tags match takes
// them, and every filtered pull would read them all again).
func (f *FSM) handRedeliveries(cl *logs.ConsumeLog, g *group, h handing, start int64, n int, check *tagFilter, b *pullBound, res *PullResult) {
	q := g.redeliver
	var skipped []redelivery
	i, scanned := 0, 0
	for ; i < len(q) && len(res.Entries) < n; i++ {
		r := q[i]
		if r.seq < start { // removed by retention
			g.lost++
			continue
		}
		if check != nil && scanned == maxRedeliveryTagScan {
			break
		}
		var e logs.ConsumeEntry
		if check != nil || b.bounded() {
			e = f.consumeEntry(cl, r.seq)
		}
		if check != nil {
			scanned++
			if !check.matches(f, e) {
				skipped = append(skipped, r)
				continue
			}
		}
		if !b.take(e.Size) {
			break
		}
		res.Entries = append(res.Entries, f.hand(h, r, e))
	}
	g.redeliver = append(q[i:], skipped...)
}

// maxTagScan bounds the consume-log entries one tag-filtered pull looks
// at, so that a rare tag costs apply a bounded time per pull; a pull that
// stops there says More, and the leader pulls again at once. Tests lower
// it.
var maxTagScan = 10000

// maxRedeliveryTagScan bounds the redeliveries one tag-filtered pull looks
// at: those no consumer's tags match stay due, and each pull would look at
// them again, a read each (and their messages' where the tag masks
// collide), with nothing new to hand out.
var maxRedeliveryTagScan = 64

// checkOptions reports whether a pull's options are within their bounds.
func (c *Pull) checkOptions() error {
	if c.App != "" {
		if err := limits.CheckName("application", c.App); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	for _, t := range c.Tags {
		if t == "" || len(t) > message.MaxTagLen {
			return fmt.Errorf("%w: pull tag length %d (1..%d)", ErrInvalid, len(t), message.MaxTagLen)
		}
	}
	if len(c.Tags) > message.MaxTags {
		return fmt.Errorf("%w: pull of %d tags (at most %d)", ErrInvalid, len(c.Tags), message.MaxTags)
	}
	if err := c.Start.check(); err != nil {
		return err
	}
	if c.StartAt < 0 {
		return fmt.Errorf("%w: start time %d before the epoch", ErrInvalid, c.StartAt)
	}
	return checkIdleExpiry(c.IdleExpiry)
}

// CheckPull reports whether apply would refuse c for its content alone: the
// leader calls it before proposing.
func CheckPull(c *Pull) error {
	if err := checkNames(c.Subject, c.ConsumerGroup, c.Consumer); err != nil {
		return err
	}
	if c.Max <= 0 {
		return fmt.Errorf("%w: pull of %d entries", ErrInvalid, c.Max)
	}
	return c.checkOptions()
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
func (f *FSM) canRegister(k groupKey, c *Pull) error {
	g := f.st.groups[k]
	switch {
	case c.App != "" && f.st.appConsumers[c.App] >= int64(c.MaxConsumers):
		return fmt.Errorf("%w: application %s has %d consumers registered in this broker group (at most %d)", ErrLimit, c.App, f.st.appConsumers[c.App], c.MaxConsumers)
	case len(f.st.consumers) >= maxConsumers:
		return fmt.Errorf("%w: the broker group has %d consumers registered (at most %d)", ErrLimit, len(f.st.consumers), maxConsumers)
	case g != nil && g.consumers >= maxConsumersPerGroup:
		return fmt.Errorf("%w: consumer group %s of %s has %d consumers (at most %d)", ErrLimit, k.group, k.subject, g.consumers, maxConsumersPerGroup)
	case g == nil:
		return f.canAddGroup(k)
	}
	return nil
}

// resend hands cs again the entries it holds unacked at or after pull
// sequence from, up to limit and while they fit b: the consumer asked from
// there, so it never received them. This makes a pull whose reply was lost
// harmless. An entry below start, whose message retention removed, costs
// no bytes (the leader acknowledges it on the consumer's behalf).
func (f *FSM) resend(cl *logs.ConsumeLog, cs *consumer, from int64, limit int, start int64, b *pullBound, res *PullResult) {
	if from < 0 || from >= cs.next {
		return
	}
	if len(cs.window) == 0 {
		return
	}
	read := consumeReader{f: f, cl: cl} // the window's entries lie mostly in sequence: read them in runs
	last := cs.window[len(cs.window)-1].consumeSeq
	for i := int(max(from-cs.ackPos, 0)); i < len(cs.window) && len(res.Entries) < limit; i++ {
		p := cs.window[i]
		if p.acked {
			continue
		}
		var at MessageAt
		if b.bounded() {
			at = MessageAt{Offset: Gone}
			if p.consumeSeq >= start {
				e := read.entry(p.consumeSeq, max(last+1, p.consumeSeq+1))
				at = MessageAt{Offset: e.Offset, Size: e.Size}
			}
		}
		if !b.take(at.Size) {
			return
		}
		res.Entries = append(res.Entries, Pulled{PullSeq: cs.ackPos + int64(i), ConsumeSeq: p.consumeSeq, Deliveries: p.deliveries, At: at})
	}
}

// retainedStart is firstRetained of subject's consume log, or, for a
// subject without one, a start no sequence is below.
func (f *FSM) retainedStart(subject string) int64 {
	if cl := f.store.consumeLog(subject); cl != nil {
		return f.firstRetained(subject, cl)
	}
	return 0
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

// newGroup creates a consumer group at position p of its subject.
func (f *FSM) newGroup(k groupKey, cl *logs.ConsumeLog, p StartPosition, at int64, settings ConsumerGroupSettings) *group {
	g := &group{cursor: f.position(k.subject, cl, p, at), settings: settings, gen: f.st.takeGen(), idleSince: f.st.now}
	f.st.addGroup(k, g)
	return g
}

// position returns the consume-log sequence of a start position: the
// first retained entry, the next one to be appended, or the first appended
// at or after at. A subject without a consume log starts at 0, where its
// first message will be.
func (f *FSM) position(subject string, cl *logs.ConsumeLog, p StartPosition, at int64) int64 {
	if cl == nil {
		return 0
	}
	switch p {
	case StartLatest:
		return cl.NextSeq()
	case StartAtTime:
		f.flushUnread(cl)
		return must(cl.Search(f.firstRetained(subject, cl), func(e logs.ConsumeEntry) bool { return e.AppendedAt >= at }))
	}
	return f.firstRetained(subject, cl)
}

// flushUnread flushes the logs if cl or the message log holds what
// readers cannot see yet (appended by this batch): a search reads cl's
// entries, a tag filter those and their messages.
func (f *FSM) flushUnread(cl *logs.ConsumeLog) {
	if ml := f.store.messages.Log(); cl.EndSeq() < cl.NextSeq() || ml.End() < ml.Next() {
		must(0, f.store.flush())
	}
}

// skipRemoved moves a group's cursor past entries retention removed before
// the group reached them, counting them lost.
func (f *FSM) skipRemoved(g *group, start int64) {
	if g.cursor < start {
		g.lost += start - g.cursor
		g.cursor = start
	}
}

// handing is how a pull hands out its entries.
type handing struct {
	cs         *consumer
	now        int64
	ackWait    int64 // milliseconds; 0 for no deadline
	atMostOnce bool
}

// hand gives consume-log sequence r.seq to a consumer as its next pull
// sequence, one delivery more; e is its consume-log entry, when the pull
// read it. The pull log records the consumer by the low 32 bits of its
// epoch (the record's field is 32 bits; nothing reads it back but tools).
// An at-most-once entry is done as it is handed out.
func (f *FSM) hand(h handing, r redelivery, e logs.ConsumeEntry) Pulled {
	cs := h.cs
	pos := must(f.store.pulls.Append(logs.PullEntry{Consumer: uint32(cs.epoch), PullSeq: cs.next, ConsumeSeq: r.seq}))
	p := pulled{consumeSeq: r.seq, pos: pos, deliveries: r.deliveries + 1, acked: h.atMostOnce}
	if !h.atMostOnce {
		cs.open++
		if h.ackWait > 0 {
			p.deadline = h.now + h.ackWait
			cs.addDeadline(p.deadline, true)
		}
	}
	cs.window = append(cs.window, p)
	f.tl.add(EventHandedOut, r.seq, p.deliveries, 0)
	out := Pulled{PullSeq: cs.next, ConsumeSeq: r.seq, Deliveries: p.deliveries, At: MessageAt{Offset: e.Offset, Size: e.Size}}
	cs.next++
	return out
}
