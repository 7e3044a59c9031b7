package fsm

import "fmt"

// applyAck marks pull sequences acknowledged and moves the ack position
// over the contiguous acknowledged ones. Sequences below the ack position
// are already done and are ignored; a range past what was pulled refuses
// the whole command.
func (f *FSM) applyAck(c *Ack) any {
	if err := checkNames(c.Subject, c.Group, c.Consumer); err != nil {
		return err
	}
	cs := f.st.consumer(consumerKey{c.Subject, c.Group, c.Consumer}, false)
	if cs == nil {
		return fmt.Errorf("%w: unknown consumer %s of group %s on %s", ErrInvalid, c.Consumer, c.Group, c.Subject)
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
	for _, r := range c.Ranges {
		for seq := max(r.First, cs.ackPos); seq <= r.Last; seq++ {
			cs.window[seq-cs.ackPos].acked = true
		}
	}
	cs.advance()
	return &AckResult{AckPos: cs.ackPos}
}
