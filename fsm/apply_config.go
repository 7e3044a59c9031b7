package fsm

import "fmt"

// applySetBrokerConfig changes the broker group's configuration, at the
// entry index, after checking the change: a change the leader checked
// against an older state, and any proposed by a leader that checked
// nothing, is refused here alike on every replica, and a refused one
// changes nothing, the state's clock included. A seed of a group already
// configured by a command changes nothing either. From the next command
// on, apply goes by the new values (see useConfig).
func (f *FSM) applySetBrokerConfig(index uint64, c *SetBrokerConfig) any {
	cur := &f.st.config
	switch {
	case c.Set&^SetAllConfig != 0:
		return fmt.Errorf("%w: broker group configuration: unknown settings %#x", ErrInvalid, uint8(c.Set))
	case c.Set == 0:
		return fmt.Errorf("%w: broker group configuration: the change names no setting", ErrInvalid)
	case c.Seed && cur.source == ConfigGroup:
		return &BrokerConfigResult{Config: f.brokerConfigInfo()}
	case cur.source != ConfigGroup && c.Set != SetAllConfig:
		// The settings it does not name would come from each replica's
		// own values (ConfigNode), or stay the defaults on some replicas
		// and not others: the group's configuration is first set whole.
		return fmt.Errorf("%w: broker group configuration: the group has none yet, and its first names every setting "+
			"(its leader seeds it with its own values)", ErrInvalid)
	}
	next := c.With(cur.BrokerConfig)
	if err := next.Check(); err != nil {
		return err
	}
	f.st.stamp(c.Now)
	if changed := next.differences(cur.BrokerConfig, "was"); len(changed) > 0 {
		f.log.Info("broker group configuration changed", append([]any{"index", index, "seed", c.Seed}, changed...)...)
	}
	f.useConfig(next, cur.source == ConfigNode)
	cur.source, cur.index = ConfigGroup, index
	f.warnFlags(next)
	return &BrokerConfigResult{Changed: true, Config: f.brokerConfigInfo()}
}

// brokerConfigInfo describes the configuration in the state; the caller
// holds stateMu.
func (f *FSM) brokerConfigInfo() BrokerConfigInfo {
	c := f.st.config
	return BrokerConfigInfo{BrokerConfig: c.BrokerConfig, Source: c.source, Index: c.index}
}
