package fsm

import (
	"fmt"
	"slices"
)

// Dead letters are kept in the replicated state, per group, in the order
// they died, as (consume-log sequence, deliveries, time): the message
// itself stays where it is in the message log, for as long as retention
// keeps it. Their number is bounded per group and in all; at either bound
// the group's oldest goes to make room (counted as dropped).
var (
	maxDeadPerGroup = 100000
	maxDeadTotal    = 1000000
)

// addDead records a dead letter of g.
func (f *FSM) addDead(g *group, d deadLetter) {
	if len(g.dead) >= maxDeadPerGroup || f.st.deadTotal >= int64(maxDeadTotal) {
		g.deadDropped++
		if len(g.dead) == 0 {
			return // every dead letter is another group's: this one goes
		}
		g.dead = slices.Delete(g.dead, 0, 1)
		f.st.deadTotal--
	}
	g.dead = append(g.dead, d)
	f.st.deadTotal++
}

// applyDeadLetters resends or purges dead letters of a group.
func (f *FSM) applyDeadLetters(c *DeadLetters) any {
	if err := checkGroupNames(c.Subject, c.Group); err != nil {
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
	f.st.stamp(c.Now)
	res := &DeadLettersResult{}
	g := f.st.groups[groupKey{c.Subject, c.Group}]
	if g == nil {
		return res
	}
	named := make(map[int64]bool, len(c.Seqs))
	for _, s := range c.Seqs {
		named[s] = true
	}
	start := f.retainedStart(c.Subject)
	kept := g.dead[:0]
	for _, d := range g.dead {
		if !c.All && !named[d.seq] {
			kept = append(kept, d)
			continue
		}
		res.Done++
		f.st.deadTotal--
		if c.Op == DeadResend {
			if d.seq < start {
				g.lost++ // retention removed it
				continue
			}
			g.redeliver = append(g.redeliver, redelivery{seq: d.seq})
		}
	}
	clear(g.dead[len(kept):])
	g.dead = kept
	return res
}
