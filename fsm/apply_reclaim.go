package fsm

// applyReclaim puts a consumer's unacked entries on its group's redelivery
// queue, in pull order, so the rest of the group receives them, and
// releases them from the consumer: a late ack for them is ignored.
func (f *FSM) applyReclaim(c *Reclaim) any {
	if err := checkNames(c.Subject, c.Group, c.Consumer); err != nil {
		return err
	}
	f.st.stamp(c.Now)
	cs := f.st.consumer(consumerKey{c.Subject, c.Group, c.Consumer}, false)
	if cs == nil {
		return &ReclaimResult{}
	}
	g := f.group(groupKey{c.Subject, c.Group}, f.store.consumeLog(c.Subject))
	n := 0
	for _, p := range cs.window {
		if !p.acked {
			g.redeliver = append(g.redeliver, p.consumeSeq)
			n++
		}
	}
	cs.window = nil
	cs.ackPos = cs.next
	return &ReclaimResult{Reclaimed: n}
}
