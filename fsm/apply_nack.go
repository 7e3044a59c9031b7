package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/internal/message"
)

// consumerFor returns the registration of a consumer's command and its
// group, if the command names its current epoch (0: any) and only pull
// sequences it was handed; otherwise the error refusing the command.
func (f *FSM) consumerFor(subject, group, name string, epoch uint64, ranges []message.AckRange) (*consumer, *group, error) {
	if err := checkNames(subject, group, name); err != nil {
		return nil, nil, err
	}
	cs := f.st.byKey[consumerKey{subject, group, name}]
	if cs == nil {
		return nil, nil, fmt.Errorf("%w: consumer %s of group %s on %s is not registered (its session expired, or it never pulled)",
			ErrStaleConsumer, name, group, subject)
	}
	if epoch != 0 && epoch != cs.epoch {
		return nil, nil, fmt.Errorf("%w: consumer %s of group %s on %s: epoch %d ended (its session expired); it is epoch %d now",
			ErrStaleConsumer, name, group, subject, epoch, cs.epoch)
	}
	for _, r := range ranges {
		if r.First < 0 || r.Last < r.First || r.Last >= cs.next {
			return nil, nil, fmt.Errorf("%w: pull sequences %d..%d; consumer %s has pulled 0..%d",
				ErrInvalid, r.First, r.Last, name, cs.next-1)
		}
	}
	return cs, f.st.groups[groupKey{subject, group}], nil
}

// eachOpen calls fn with every pull sequence of ranges the consumer still
// holds in its window (at or after its ack position), each once.
func eachOpen(cs *consumer, ranges []message.AckRange, fn func(seq int64)) {
	for _, r := range MergeRanges(ranges) {
		for seq := max(r.First, cs.ackPos); seq <= r.Last; seq++ {
			fn(seq)
		}
	}
}

// applyNack ends the consumer's hold on the named entries: each comes back
// to the group at the retry time, or becomes a dead letter if the group has
// handed it out its most deliveries already.
func (f *FSM) applyNack(c *Nack) any {
	cs, g, err := f.consumerFor(c.Subject, c.ConsumerGroup, c.Consumer, c.Epoch, c.Ranges)
	if err != nil {
		return err
	}
	// Compared as a difference: now + the bound overflows for a time near
	// the largest (every nack would be refused, or worse, accepted).
	if now := max(c.Now, f.st.now); c.RetryAt < 0 || c.RetryAt > now && c.RetryAt-now > maxRetryDelay {
		return fmt.Errorf("%w: retry time %d is not within %s of now", ErrInvalid, c.RetryAt, millis(maxRetryDelay))
	}
	now := f.st.stamp(c.Now)
	f.tl.on(now, c.Subject, c.ConsumerGroup, c.Consumer, "")
	k := groupKey{c.Subject, c.ConsumerGroup}
	res := &NackResult{}
	queued := len(g.redeliver) // giveBack only appends to it
	eachOpen(cs, c.Ranges, func(seq int64) {
		if p, open := cs.finish(seq); open {
			at := c.RetryAt
			if at == 0 {
				at = now + g.settings.retryDelay(p.deliveries)
			}
			f.tl.add(EventNacked, p.consumeSeq, p.deliveries, max(at, now))
			if f.giveBack(k, g, p, at, now) {
				res.Dead++
			} else {
				res.Retried++
			}
		}
	})
	cs.advance()
	res.Due = len(g.redeliver) - queued
	return res
}

// giveBack hands a finished delivery back to its group: due again at at
// (through the schedule if that is later than now), or, once the group
// has handed it out its most deliveries, into its dead letters. It
// reports whether it became a dead letter.
func (f *FSM) giveBack(k groupKey, g *group, p pulled, at, now int64) bool {
	if p.deliveries >= g.settings.MaxDeliveries {
		f.tl.add(EventDeadLettered, p.consumeSeq, p.deliveries, 0)
		f.addDead(g, deadLetter{seq: p.consumeSeq, deliveries: p.deliveries, at: now})
		return true
	}
	r := redelivery{seq: p.consumeSeq, deliveries: p.deliveries}
	if at <= now || !f.scheduleRetry(k, g, r, at, now) {
		g.redeliver = append(g.redeliver, r)
	}
	return false
}

// applyExtend gives the named entries that are still open the group's
// whole ack wait again, from now.
func (f *FSM) applyExtend(c *Extend) any {
	cs, g, err := f.consumerFor(c.Subject, c.ConsumerGroup, c.Consumer, c.Epoch, c.Ranges)
	if err != nil {
		return err
	}
	now := f.st.stamp(c.Now)
	res := &ExtendResult{}
	if g.settings.AckWait == 0 {
		return res
	}
	eachOpen(cs, c.Ranges, func(seq int64) {
		if p := &cs.window[seq-cs.ackPos]; !p.acked {
			p.deadline = now + g.settings.AckWait
			// An entry handed out while the group had no ack wait had no
			// deadline: the consumer's lower bound must cover its new one.
			cs.addDeadline(p.deadline, seq == cs.next-1)
			res.Extended++
		}
	})
	return res
}

// applyExpire hands the group again the named entries whose ack wait has
// passed, then recomputes the consumer's earliest deadline (which Overdue
// asks for when the bound it had passed with nothing overdue).
func (f *FSM) applyExpire(c *Expire) any {
	cs, g, err := f.consumerFor(c.Subject, c.ConsumerGroup, c.Consumer, c.Epoch, c.Ranges)
	if err != nil {
		return err
	}
	now := f.st.stamp(c.Now)
	f.tl.on(now, c.Subject, c.ConsumerGroup, c.Consumer, "")
	k := groupKey{c.Subject, c.ConsumerGroup}
	res := &ExpireResult{}
	eachOpen(cs, c.Ranges, func(seq int64) {
		if p := cs.window[seq-cs.ackPos]; !p.acked && p.deadline != 0 && p.deadline <= now {
			cs.finish(seq)
			f.tl.add(EventExpired, p.consumeSeq, p.deliveries, 0)
			if f.giveBack(k, g, p, now, now) {
				res.Dead++
			} else {
				res.Expired++
			}
		}
	})
	cs.advance()
	cs.setDeadlines()
	return res
}
