package fsm

// applyReclaim puts a consumer's unacked entries on its group's redelivery
// queue, in pull order, so the rest of the group receives them (or into
// its dead letters, those handed out the group's most deliveries), and
// forgets the consumer: a late ack from it is refused as stale. A Reclaim
// naming an epoch other than the consumer's registration (a retried
// proposal arriving after the consumer registered afresh) does nothing.
func (f *FSM) applyReclaim(c *Reclaim) any {
	if err := checkNames(c.Subject, c.ConsumerGroup, c.Consumer); err != nil {
		return err
	}
	f.st.stamp(c.Now)
	cs := f.st.byKey[consumerKey{c.Subject, c.ConsumerGroup, c.Consumer}]
	if cs == nil || (c.Epoch != 0 && c.Epoch != cs.epoch) {
		return &ReclaimResult{}
	}
	k := groupKey{c.Subject, c.ConsumerGroup}
	g := f.st.groups[k]
	f.tl.on(f.st.now, c.Subject, c.ConsumerGroup, c.Consumer, "")
	n := 0
	for _, p := range cs.window {
		if !p.acked {
			f.tl.add(EventReclaimed, p.consumeSeq, p.deliveries, 0)
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
	if g.consumers == 0 && f.store.consumeLog(c.Subject) == nil && g.provisional() {
		// A group of a subject without messages, as its last consumer's
		// pull created it, holds nothing: forget it with its consumer, so
		// that names a client makes up leave nothing behind.
		f.st.removeGroup(k)
		return &ReclaimResult{Reclaimed: n, Forgotten: true}
	}
	return &ReclaimResult{Reclaimed: n}
}

// provisional reports whether a group holds nothing a pull did not give it
// on creation: no position past the start, nothing due again or dead, and
// the default settings (but for the idle expiry a broadcast pull sets).
func (g *group) provisional() bool {
	s := g.settings
	s.IdleExpiry = 0
	return g.cursor == 0 && len(g.redeliver) == 0 && g.retrying == 0 && len(g.dead) == 0 && g.lost == 0 &&
		g.deadDropped == 0 && s == DefaultConsumerGroupSettings()
}
