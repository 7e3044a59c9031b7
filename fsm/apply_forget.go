package fsm

import "fmt"

// applyForget removes a consumer group of a subject and all its consumers
// from the state: their unacked entries, the group's cursor and its dead
// letters go with them; its retries are dropped when they fire. Forgetting
// a group that is not known, or with IdleFor one that is not idle that
// long, changes nothing.
func (f *FSM) applyForget(c *Forget) any {
	if err := checkGroupNames(c.Subject, c.ConsumerGroup); err != nil {
		return err
	}
	if c.IdleFor < 0 {
		return fmt.Errorf("%w: idle for %d ms", ErrInvalid, c.IdleFor)
	}
	now := f.st.stamp(c.Now)
	k := groupKey{c.Subject, c.ConsumerGroup}
	g := f.st.groups[k]
	if g == nil || c.IdleFor > 0 && (g.consumers > 0 || g.idleSince > now-c.IdleFor) {
		return &ForgetResult{}
	}
	res := &ForgetResult{Known: true}
	for _, cs := range f.st.sortedConsumers() {
		if cs.key.subject == c.Subject && cs.key.group == c.ConsumerGroup {
			res.Consumers++
			res.Unacked += cs.unacked()
			f.st.forget(cs)
		}
	}
	f.st.removeGroup(k)
	return res
}
