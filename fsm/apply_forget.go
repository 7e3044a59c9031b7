package fsm

// applyForget removes a consumer group of a subject and all its consumers
// from the state: their unacked entries and the group's cursor go with
// them. Forgetting a group that is not known changes nothing.
func (f *FSM) applyForget(c *Forget) any {
	if err := CheckName("subject", c.Subject); err != nil {
		return err
	}
	if err := CheckName("group", c.Group); err != nil {
		return err
	}
	f.st.stamp(c.Now)
	k := groupKey{c.Subject, c.Group}
	if f.st.groups[k] == nil {
		return &ForgetResult{}
	}
	res := &ForgetResult{Known: true}
	for _, cs := range f.st.sortedConsumers() {
		if cs.key.subject == c.Subject && cs.key.group == c.Group {
			res.Consumers++
			res.Unacked += cs.unacked()
			f.st.forget(cs)
		}
	}
	f.st.removeGroup(k)
	return res
}
