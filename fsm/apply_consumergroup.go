package fsm

import "fmt"

// applySetGroup changes a group's settings, creating the group if it does
// not exist (so an operator can set a group up before it first pulls).
func (f *FSM) applySetGroup(c *SetConsumerGroup) any {
	if err := checkGroupNames(c.Subject, c.ConsumerGroup); err != nil {
		return err
	}
	if c.Set&^setAll != 0 {
		return fmt.Errorf("%w: unknown setting bits %#x", ErrInvalid, uint8(c.Set&^setAll))
	}
	if err := c.Start.check(); err != nil {
		return err
	}
	k := groupKey{c.Subject, c.ConsumerGroup}
	g := f.st.groups[k]
	current := DefaultConsumerGroupSettings()
	if g != nil {
		current = g.settings
	}
	settings := c.Set.apply(current, c.Settings)
	if err := settings.Check(); err != nil {
		return err
	}
	if g == nil {
		if err := f.canAddGroup(k); err != nil {
			return err
		}
	}
	f.st.stamp(c.Now)
	if g == nil {
		f.newGroup(k, f.store.consumeLog(c.Subject), c.Start, c.StartAt, settings)
		return &ConsumerGroupResult{Created: true}
	}
	g.settings = settings
	return &ConsumerGroupResult{}
}

// applyResetGroup moves a group's cursor, creating the group if it does
// not exist.
func (f *FSM) applyResetGroup(c *ResetConsumerGroup) any {
	if err := checkGroupNames(c.Subject, c.ConsumerGroup); err != nil {
		return err
	}
	if err := c.To.check(); err != nil {
		return err
	}
	if c.At < 0 {
		return fmt.Errorf("%w: reset to time %d, before the epoch", ErrInvalid, c.At)
	}
	k := groupKey{c.Subject, c.ConsumerGroup}
	g := f.st.groups[k]
	if g == nil {
		if err := f.canAddGroup(k); err != nil {
			return err
		}
	}
	f.st.stamp(c.Now)
	cl := f.store.consumeLog(c.Subject)
	if g == nil {
		f.newGroup(k, cl, c.To, c.At, DefaultConsumerGroupSettings())
		return &ConsumerGroupResult{Created: true}
	}
	g.cursor = f.position(c.Subject, cl, c.To, c.At)
	g.redeliver = nil
	g.gen = f.st.takeGen() // retries of the old life are dropped as they fire
	g.retrying = 0
	return &ConsumerGroupResult{}
}

// canAddGroup reports whether group k, not known, may be created: the
// limits on groups.
func (f *FSM) canAddGroup(k groupKey) error {
	switch {
	case f.st.groupsOf[k.subject] >= maxGroupsPerSubject:
		return fmt.Errorf("%w: subject %s has %d consumer groups (at most %d)", ErrLimit, k.subject, f.st.groupsOf[k.subject], maxGroupsPerSubject)
	case len(f.st.groups) >= maxGroups:
		return fmt.Errorf("%w: the broker group has %d consumer groups (at most %d)", ErrLimit, len(f.st.groups), maxGroups)
	}
	return nil
}
