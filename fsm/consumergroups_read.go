package fsm

import (
	"cmp"
	"slices"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// ConsumerGroupInfo is what a consumer group holds and owes, for operators.
type ConsumerGroupInfo struct {
	Subject, ConsumerGroup string
	Settings               ConsumerGroupSettings
	Cursor                 int64 // the next consume-log sequence to hand out
	End                    int64 // the subject's next sequence
	Backlog                int64 // entries the cursor has not reached
	Redeliver              int   // entries due again now
	Retrying               int64 // entries waiting for their retry time
	Unacked                int   // entries handed out and not finished
	Consumers              int
	DeadLetters            int
	DeadDropped            int64 // dead letters dropped at the bounds
	Lost                   int64 // messages retention removed before the group finished them
	IdleSince              int64 // Unix milliseconds: since when it has had no consumer (if it has none)
}

// Lag is what the group still owes: every message not yet finished.
func (g ConsumerGroupInfo) Lag() int64 {
	return g.Backlog + int64(g.Redeliver) + g.Retrying + int64(g.Unacked)
}

// ConsumerGroups returns every consumer group, by subject and name. Safe on any
// goroutine.
func (f *FSM) ConsumerGroups() []ConsumerGroupInfo {
	ends := f.Ends()
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	unacked := map[groupKey]int{}
	for _, c := range f.st.consumers {
		unacked[groupKey{c.key.subject, c.key.group}] += c.open
	}
	out := make([]ConsumerGroupInfo, 0, len(f.st.groups))
	for _, k := range f.st.sortedGroups() {
		out = append(out, f.groupInfo(k, ends, unacked[k]))
	}
	return out
}

// HasConsumerGroup reports whether the consumer group of subject is known: a
// map lookup, unlike Group. Safe on any goroutine.
func (f *FSM) HasConsumerGroup(subject, group string) bool {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	return f.st.groups[groupKey{subject, group}] != nil
}

// ConsumerGroup returns one consumer group; false if it is not known. Safe on any
// goroutine.
func (f *FSM) ConsumerGroup(subject, group string) (ConsumerGroupInfo, bool) {
	ends := f.Ends()
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	k := groupKey{subject, group}
	if f.st.groups[k] == nil {
		return ConsumerGroupInfo{}, false
	}
	unacked := 0
	for _, c := range f.st.consumers {
		if c.key.subject == subject && c.key.group == group {
			unacked += c.open
		}
	}
	return f.groupInfo(k, ends, unacked), true
}

func (f *FSM) groupInfo(k groupKey, ends LogEnds, unacked int) ConsumerGroupInfo {
	g := f.st.groups[k]
	end := ends.Consume[k.subject] / logs.ConsumeRecordSize
	return ConsumerGroupInfo{Subject: k.subject, ConsumerGroup: k.group, Settings: g.settings, Cursor: g.cursor, End: end,
		Backlog: max(0, end-g.cursor), Redeliver: len(g.redeliver), Retrying: g.retrying, Unacked: unacked,
		Consumers: g.consumers, DeadLetters: len(g.dead), DeadDropped: g.deadDropped, Lost: g.lost, IdleSince: g.idleSince}
}

// DeadLetter is one dead letter of a group.
type DeadLetter struct {
	Seq        int64  // the subject's consume-log sequence: where the message is
	Deliveries uint32 // how many times the group was handed it
	At         int64  // Unix milliseconds: when it became a dead letter
}

// DeadLetters returns up to limit dead letters of a group from the
// offset-th (oldest first), and how many it has. Safe on any goroutine.
func (f *FSM) DeadLetters(subject, group string, offset, limit int) ([]DeadLetter, int) {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	g := f.st.groups[groupKey{subject, group}]
	if g == nil {
		return nil, 0
	}
	var out []DeadLetter
	for i := max(offset, 0); i < len(g.dead) && len(out) < limit; i++ {
		d := g.dead[i]
		out = append(out, DeadLetter{Seq: d.seq, Deliveries: d.deliveries, At: d.at})
	}
	return out, len(g.dead)
}

// DeadLetterOf returns the oldest dead letter of a group with consume-log
// sequence seq; false if it has none. Safe on any goroutine.
func (f *FSM) DeadLetterOf(subject, group string, seq int64) (DeadLetter, bool) {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	if g := f.st.groups[groupKey{subject, group}]; g != nil {
		for _, d := range g.dead {
			if d.seq == seq {
				return DeadLetter{Seq: d.seq, Deliveries: d.deliveries, At: d.at}, true
			}
		}
	}
	return DeadLetter{}, false
}

// Overdue names, per consumer, pull sequences whose ack wait has passed at
// now, at most limit in all: a leader proposes an Expire for each. Only
// consumers whose deadline bound has passed are looked at. The bound is
// exact for a consumer holding nothing (it has none) and for one whose
// deadlines run in the order it was handed its entries; otherwise (an
// entry was extended, or the ack wait shortened) it may have passed with
// nothing overdue, and the consumer is named with no sequences, so that an
// Expire brings the bound up to date and it is not looked at again. Safe
// on any goroutine.
func (f *FSM) Overdue(now int64, limit int) []Overdue {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	// Only consumers whose earliest deadline has passed, in epoch order: the
	// limit cuts alike every time, and the others cost one comparison.
	var due []*consumer
	for _, c := range f.st.consumers {
		if c.nextDeadline <= now {
			due = append(due, c)
		}
	}
	slices.SortFunc(due, func(a, b *consumer) int { return cmp.Compare(a.epoch, b.epoch) })
	var out []Overdue
	n := 0
	for _, c := range due {
		if n >= limit {
			break
		}
		o := Overdue{ID: ConsumerID{Subject: c.key.subject, ConsumerGroup: c.key.group, Consumer: c.key.name}, Epoch: c.epoch}
		for i, p := range c.window {
			if n >= limit || len(o.Ranges) == limits.MaxAckRanges {
				break
			}
			if !p.acked && p.deadline != 0 && p.deadline <= now {
				seq := c.ackPos + int64(i)
				if k := len(o.Ranges); k > 0 && o.Ranges[k-1].Last == seq-1 {
					o.Ranges[k-1].Last = seq
				} else {
					o.Ranges = append(o.Ranges, message.AckRange{First: seq, Last: seq})
				}
				n++
			}
		}
		out = append(out, o)
	}
	return out
}

// Overdue is one consumer's entries past their ack wait.
type Overdue struct {
	ID     ConsumerID
	Epoch  uint64
	Ranges []message.AckRange
}

// IdleConsumerGroup is a group to forget: it has had no consumer for its idle
// expiry.
type IdleConsumerGroup struct {
	Subject, ConsumerGroup string
	IdleFor                int64 // milliseconds: its idle expiry, for the Forget
}

// IdleConsumerGroups returns the groups whose idle expiry has passed at now. Safe
// on any goroutine.
func (f *FSM) IdleConsumerGroups(now int64) []IdleConsumerGroup {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	var out []IdleConsumerGroup
	for _, k := range f.st.sortedGroups() {
		g := f.st.groups[k]
		if e := g.settings.IdleExpiry; e > 0 && g.consumers == 0 && g.idleSince+e <= now {
			out = append(out, IdleConsumerGroup{Subject: k.subject, ConsumerGroup: k.group, IdleFor: e})
		}
	}
	return out
}
