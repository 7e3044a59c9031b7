package fsm

import (
	"fmt"
	"slices"
)

// Dead letters are kept in the replicated state, per group, in the order
// they died, as (consume-log sequence, deliveries, time): the message
// itself stays where it is in the message log, for as long as retention
// keeps it. Their number is bounded per group and in all: at a group's
// bound its oldest goes to make room, at the broker group's the oldest of
// the group deadVictim names (the fair share, deadshare.go); each counted
// as dropped by its group.
var (
	maxDeadPerGroup = 100000
	maxDeadTotal    = 1000000
)

// addDead records a dead letter of g.
func (f *FSM) addDead(g *group, d deadLetter) {
	victim := g
	if len(g.dead) < maxDeadPerGroup && f.st.deadTotal >= int64(maxDeadTotal) {
		victim = f.st.deadVictim()
	}
	if victim != nil && (len(victim.dead) >= maxDeadPerGroup || f.st.deadTotal >= int64(maxDeadTotal)) {
		victim.deadDropped++
		before := len(victim.dead)
		victim.dead = slices.Delete(victim.dead, 0, 1)
		f.st.recountDead(victim, before, false)
	}
	before := len(g.dead)
	g.dead = append(g.dead, d)
	f.st.recountDead(g, before, false)
}

// applyDeadLetters resends or purges dead letters of a group.
func (f *FSM) applyDeadLetters(c *DeadLetters) any {
	if err := checkGroupNames(c.Subject, c.ConsumerGroup); err != nil {
		return err
	}
	if c.Op != DeadResend && c.Op != DeadPurge {
		return fmt.Errorf("%w: unknown dead-letter operation %d", ErrInvalid, c.Op)
	}
	for _, s := range c.Seqs {
		if s < 0 {
			return fmt.Errorf("%w: dead letter sequence %d", ErrInvalid, s)
		}
	}
	f.tl.on(f.st.stamp(c.Now), c.Subject, c.ConsumerGroup, "", c.By)
	res := &DeadLettersResult{}
	g := f.st.groups[groupKey{c.Subject, c.ConsumerGroup}]
	if g == nil {
		return res
	}
	named := make(map[int64]bool, len(c.Seqs))
	for _, s := range c.Seqs {
		named[s] = true
	}
	start := f.retainedStart(c.Subject)
	before := len(g.dead)
	kept := g.dead[:0]
	for _, d := range g.dead {
		if !c.All && !named[d.seq] {
			kept = append(kept, d)
			continue
		}
		res.Done++
		if c.Op == DeadResend {
			if d.seq < start {
				g.lost++ // retention removed it
				continue
			}
			f.tl.add(EventResent, d.seq, d.deliveries, 0)
			g.redeliver = append(g.redeliver, redelivery{seq: d.seq})
		} else {
			f.tl.add(EventPurged, d.seq, d.deliveries, 0)
		}
	}
	clear(g.dead[len(kept):])
	g.dead = kept
	f.st.recountDead(g, before, false)
	return res
}
