package fsm

// applyReclaim puts a consumer's unacked entries on its group's redelivery
// queue, in pull order, so the rest of the group receives them (or into
// its dead letters, those handed out the group's most deliveries), and
// forgets the consumer: a late ack from it is refused as stale. A Reclaim
// naming an epoch other than the consumer's registration (a retried
// proposal arriving after the consumer registered afresh) does nothing.
func (f *FSM) applyReclaim(c *Reclaim) any {
	if err := checkNames(c.Subject, c.Group, c.Consumer); err != nil {
		return err
	}
	f.st.stamp(c.Now)
	cs := f.st.byKey[consumerKey{c.Subject, c.Group, c.Consumer}]
	if cs == nil || (c.Epoch != 0 && c.Epoch != cs.epoch) {
		return &ReclaimResult{}
	}
	k := groupKey{c.Subject, c.Group}
	g := f.st.groups[k]
	n := 0
	for _, p := range cs.window {
		if !p.acked {
			// A message that brought down its consumer each time it was
			// handed out ends as a dead letter too.
			f.giveBack(k, g, p, f.st.now, f.st.now)
			n++
		}
	}
	// The consumer is gone: forget it, so that consumers that come and go
	// (every process start picks a new name by default) do not pile up. If
	// it returns it is registered afresh, with a new epoch and its pull
	// sequences from 0.
	f.st.forget(cs)
	return &ReclaimResult{Reclaimed: n}
}
