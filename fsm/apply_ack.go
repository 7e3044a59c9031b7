package fsm

import (
	"cmp"
	"slices"

	"github.com/qmqgo/qmq/internal/message"
)

// applyAck marks pull sequences acknowledged and moves the ack position
// over the contiguous acknowledged ones. The ranges are merged first, so
// each sequence costs one step however the ranges overlap. Sequences below
// the ack position are already done and are ignored; a range past what was
// pulled refuses the whole command, and so does an epoch that is not the
// consumer's registration (ErrStaleConsumer).
func (f *FSM) applyAck(c *Ack) any {
	cs, _, err := f.consumerFor(c.Subject, c.ConsumerGroup, c.Consumer, c.Epoch, c.Ranges)
	if err != nil {
		return err
	}
	// Stamped only once the ack is known to be valid: a refused command
	// changes nothing, not even the state's clock.
	f.tl.on(f.st.stamp(c.Now), c.Subject, c.ConsumerGroup, c.Consumer, "")
	eachOpen(cs, c.Ranges, func(seq int64) {
		if p, open := cs.finish(seq); open {
			f.tl.add(EventAcked, p.consumeSeq, p.deliveries, 0)
		}
	})
	cs.advance()
	return &AckResult{AckPos: cs.ackPos}
}

// MergeRanges returns ranges sorted, with overlapping and adjacent ones
// joined: the same sequences, each once. The leader sends merged ranges;
// apply merges again, so that no command makes it walk a sequence twice.
func MergeRanges(ranges []message.AckRange) []message.AckRange {
	out := slices.Clone(ranges)
	slices.SortFunc(out, func(a, b message.AckRange) int {
		return cmp.Or(cmp.Compare(a.First, b.First), cmp.Compare(a.Last, b.Last))
	})
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
