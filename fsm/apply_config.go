package fsm

import "fmt"

// applySetBrokerConfig changes the broker group's configuration, at the
// entry index, after checking the result against its bounds: a change the
// leader checked against an older state, and any proposed by a leader that
// checked nothing, is refused here alike on every replica. A seed of a
// group already configured by a command changes nothing. From the next
// command on, apply goes by the new values (see useConfig).
func (f *FSM) applySetBrokerConfig(index uint64, c *SetBrokerConfig) any {
	f.st.stamp(c.Now)
	if c.Set&^SetAllConfig != 0 {
		return fmt.Errorf("%w: broker group configuration: unknown settings %#x", ErrInvalid, uint8(c.Set))
	}
	cur := &f.st.config
	if c.Seed && cur.source == ConfigGroup {
		return &BrokerConfigResult{Config: f.brokerConfigInfo()}
	}
	next := c.With(cur.BrokerConfig)
	if err := next.Check(); err != nil {
		return err
	}
	if changed := next.differences(cur.BrokerConfig, "was"); len(changed) > 0 {
		f.log.Info("broker group configuration changed", append([]any{"index", index, "seed", c.Seed}, changed...)...)
	}
	f.useConfig(next)
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
