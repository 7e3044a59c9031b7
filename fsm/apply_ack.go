package fsm

import (
	"cmp"
	"fmt"
	"slices"
)

// applyAck marks pull sequences acknowledged and moves the ack position
// over the contiguous acknowledged ones. The ranges are merged first, so
// each sequence costs one step however the ranges overlap. Sequences below
// the ack position are already done and are ignored; a range past what was
// pulled refuses the whole command, and so does an epoch that is not the
// consumer's registration (ErrStaleConsumer).
func (f *FSM) applyAck(c *Ack) any {
	if err := checkNames(c.Subject, c.Group, c.Consumer); err != nil {
		return err
	}
	cs := f.st.byKey[consumerKey{c.Subject, c.Group, c.Consumer}]
	if cs == nil {
		return fmt.Errorf("%w: consumer %s of group %s on %s is not registered (its session expired, or it never pulled)",
			ErrStaleConsumer, c.Consumer, c.Group, c.Subject)
	}
	if c.Epoch != 0 && c.Epoch != cs.epoch {
		return fmt.Errorf("%w: consumer %s of group %s on %s: epoch %d ended (its session expired); it is epoch %d now",
			ErrStaleConsumer, c.Consumer, c.Group, c.Subject, c.Epoch, cs.epoch)
	}
	for _, r := range c.Ranges {
		if r.First < 0 || r.Last < r.First || r.Last >= cs.next {
			return fmt.Errorf("%w: ack of pull sequences %d..%d; consumer %s has pulled 0..%d",
				ErrInvalid, r.First, r.Last, c.Consumer, cs.next-1)
		}
	}
	// Stamped only once the ack is known to be valid: a refused command
	// changes nothing, not even the state's clock.
	f.st.stamp(c.Now)
	for _, r := range MergeRanges(c.Ranges) {
		for seq := max(r.First, cs.ackPos); seq <= r.Last; seq++ {
			cs.window[seq-cs.ackPos].acked = true
		}
	}
	cs.advance()
	return &AckResult{AckPos: cs.ackPos}
}

// MergeRanges returns ranges sorted, with overlapping and adjacent ones
// joined: the same sequences, each once. The leader sends merged ranges;
// apply merges again, so that no command makes it walk a sequence twice.
func MergeRanges(ranges []AckRange) []AckRange {
	out := slices.Clone(ranges)
	slices.SortFunc(out, func(a, b AckRange) int { return cmp.Or(cmp.Compare(a.First, b.First), cmp.Compare(a.Last, b.Last)) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && r.First <= merged[n-1].Last+1 {
			merged[n-1].Last = max(merged[n-1].Last, r.Last)
			continue
		}
		merged = append(merged, r)
	}
	return merged
}
