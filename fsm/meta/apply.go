package meta

import (
	"fmt"
	"maps"
	"slices"

	"github.com/qmqgo/qmq/internal/auth"
)

// admit reports why cmd would be refused by the state as it is, or nil:
// every refusal of apply, limits included, and nothing else. It reads only
// cmd and s, so every replica decides alike.
func (s *state) admit(cmd Command) error {
	switch c := cmd.(type) {
	case *Register, *Deregister, *Member, *ForgetConsumer, *DeleteApp, *SetVersion:
	case *PutApp:
		old := s.Apps[c.App.Code]
		switch {
		case c.Create && old != nil:
			return fmt.Errorf("%w: application %s exists", ErrInvalid, c.App.Code)
		case !c.Create && old == nil:
			return fmt.Errorf("%w: no application %s", ErrInvalid, c.App.Code)
		case !c.Create:
			if err := updated(old, &c.App).Check(); err != nil {
				return checkAuth(err)
			}
		}
	case *RotateApp:
		if s.Apps[c.Code] == nil {
			return fmt.Errorf("%w: no application %s", ErrInvalid, c.Code)
		}
	case *Assign:
		for _, g := range c.BrokerGroups {
			if s.BrokerGroups[g] == nil {
				return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, g)
			}
		}
	case *SetWritable:
		if s.BrokerGroups[c.BrokerGroup] == nil {
			return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, c.BrokerGroup)
		}
	case *Consumer:
		if s.Subjects[c.Subject] == nil {
			return fmt.Errorf("%w: subject %s has no route", ErrInvalid, c.Subject)
		}
	default:
		return fmt.Errorf("%w: command %T", ErrInvalid, cmd)
	}
	return s.limits(cmd)
}

// apply applies a checked command. A command admit refuses changes
// nothing.
func (s *state) apply(cmd Command) error {
	if err := s.admit(cmd); err != nil {
		return err
	}
	switch c := cmd.(type) {
	case *Register:
		g := s.BrokerGroups[c.BrokerGroup]
		if g == nil {
			g = &BrokerGroup{Nodes: map[string]Node{}}
			s.BrokerGroups[c.BrokerGroup] = g
		}
		g.Nodes[c.ID] = Node{RaftAddr: c.RaftAddr, ClientAddr: c.ClientAddr, HTTPAddr: c.HTTPAddr}
	case *Deregister:
		// Idempotent, so a retried request succeeds.
		if g := s.BrokerGroups[c.BrokerGroup]; g != nil {
			delete(g.Nodes, c.ID)
			if len(g.Nodes) == 0 && s.routedTo(c.BrokerGroup) == 0 {
				delete(s.BrokerGroups, c.BrokerGroup)
			}
		}
	case *Assign:
		old := s.Subjects[c.Subject]
		if old != nil && c.IfNew {
			return nil // assigned meanwhile: the earlier assignment stands
		}
		r := &Route{}
		if old != nil {
			cp := *old
			cp.BrokerGroups = slices.Clone(old.BrokerGroups)
			r = &cp
		} else if s.Apps[c.App] != nil {
			r.App = c.App
			s.appSubjects[c.App]++
		}
		for _, g := range c.BrokerGroups {
			if !slices.Contains(r.BrokerGroups, g) {
				r.BrokerGroups = append(r.BrokerGroups, g)
				s.routed++
			}
		}
		s.Subjects[c.Subject] = r
	case *SetWritable:
		s.BrokerGroups[c.BrokerGroup].ReadOnly = !c.Writable
	case *Consumer:
		r := s.Subjects[c.Subject]
		holder := r.holderBit(c.Broker)
		i, found := slices.BinarySearch(r.Consumers, c.ConsumerGroup)
		switch {
		case found && holder == 0:
			r.setHolders(i, 0) // declared now
		case found && r.holders(i) != 0:
			r.setHolders(i, r.holders(i)|holder)
		}
		if !found {
			app := ""
			if s.Apps[c.App] != nil {
				app = c.App
				s.appGroups[app]++
				if r.ConsumerApps == nil {
					r.ConsumerApps = make([]string, len(r.Consumers))
				}
			}
			if r.ConsumerApps != nil {
				r.ConsumerApps = slices.Insert(r.ConsumerApps, i, app)
			}
			if r.ConsumerHolders != nil || holder != 0 {
				if r.ConsumerHolders == nil {
					r.ConsumerHolders = make([]uint64, len(r.Consumers))
				}
				r.ConsumerHolders = slices.Insert(r.ConsumerHolders, i, holder)
			}
			r.Consumers = slices.Insert(r.Consumers, i, c.ConsumerGroup)
			s.consumers++
		}
	case *ForgetConsumer:
		// Idempotent, so a retried request succeeds.
		if r := s.Subjects[c.Subject]; r != nil {
			if i, found := slices.BinarySearch(r.Consumers, c.ConsumerGroup); found {
				if c.Broker != "" {
					held := r.holders(i)
					if held == 0 {
						return nil // declared: only an operator forgets it
					}
					if r.setHolders(i, held&^r.holderBit(c.Broker)); r.holders(i) != 0 {
						return nil // another broker group still holds it
					}
				}
				if r.ConsumerHolders != nil {
					r.ConsumerHolders = slices.Delete(r.ConsumerHolders, i, i+1)
					r.trimHolders()
				}
				r.Consumers = slices.Delete(r.Consumers, i, i+1)
				s.consumers--
				if r.ConsumerApps != nil {
					if app := r.ConsumerApps[i]; app != "" {
						untally(s.appGroups, app)
					}
					r.ConsumerApps = slices.Delete(r.ConsumerApps, i, i+1)
					if !slices.ContainsFunc(r.ConsumerApps, func(a string) bool { return a != "" }) {
						r.ConsumerApps = nil
					}
				}
			}
		}
	case *PutApp:
		a := clone(&c.App)
		if !c.Create {
			a = updated(s.Apps[c.App.Code], &c.App)
		}
		return s.setApp(a.Code, a)
	case *RotateApp:
		old := s.Apps[c.Code]
		a := clone(old)
		a.Secrets = []auth.Secret{c.Secret}
		if c.OldExpires != 0 {
			prev := old.Secrets[0]
			prev.Expires = c.OldExpires
			a.Secrets = append(a.Secrets, prev)
		}
		return s.setApp(c.Code, a)
	case *DeleteApp:
		// Idempotent, so a retried request succeeds.
		if s.Apps[c.Code] != nil {
			if c.Release {
				s.release(c.Code)
			}
			return s.setApp(c.Code, nil)
		}
	case *Member:
		if c.ClientAddr == "" {
			delete(s.Members, c.ID)
		} else {
			s.Members[c.ID] = c.ClientAddr
		}
	case *SetVersion:
		// Never lowered (FSM.gate stopped a replica this build cannot
		// take to it).
		s.Version = max(s.Version, c.Version)
	}
	return nil
}

// release records the routes and consumer groups application code created
// as nobody's, and drops its tallies.
func (s *state) release(code string) {
	for _, r := range s.Subjects {
		if r.App == code {
			r.App = ""
		}
		if r.ConsumerApps == nil {
			continue
		}
		kept := false
		for i, app := range r.ConsumerApps {
			if app == code {
				r.ConsumerApps[i] = ""
			}
			kept = kept || r.ConsumerApps[i] != ""
		}
		if !kept {
			r.ConsumerApps = nil
		}
	}
	delete(s.appSubjects, code)
	delete(s.appGroups, code)
}

// Records reports whether recording consumer group group for broker group
// broker ("" for a declaration) would change the route: a new group, a
// provisional one declared, or one more broker group holding it.
func (r *Route) Records(group, broker string) bool {
	i, found := slices.BinarySearch(r.Consumers, group)
	if !found {
		return true
	}
	held := r.holders(i)
	return held != 0 && (broker == "" || held&r.holderBit(broker) == 0 && r.holderBit(broker) != 0)
}

// holderBit is broker group g's bit in ConsumerHolders: its index in the
// route's groups, 0 for "" or a group not in the route.
func (r *Route) holderBit(g string) uint64 {
	if i := slices.Index(r.BrokerGroups, g); g != "" && i >= 0 {
		return 1 << i
	}
	return 0
}

// holders returns the holders of consumer group i, 0 if declared.
func (r *Route) holders(i int) uint64 {
	if r.ConsumerHolders == nil {
		return 0
	}
	return r.ConsumerHolders[i]
}

// setHolders sets the holders of consumer group i.
func (r *Route) setHolders(i int, h uint64) {
	if r.ConsumerHolders == nil {
		if h == 0 {
			return
		}
		r.ConsumerHolders = make([]uint64, len(r.Consumers))
	}
	r.ConsumerHolders[i] = h
	r.trimHolders()
}

// trimHolders keeps ConsumerHolders nil while every group is declared, as
// a route that never had a provisional group encodes.
func (r *Route) trimHolders() {
	if !slices.ContainsFunc(r.ConsumerHolders, func(h uint64) bool { return h != 0 }) {
		r.ConsumerHolders = nil
	}
}

// routedTo counts the subjects routed to group.
func (s *state) routedTo(group string) int {
	n := 0
	for _, r := range s.Subjects {
		if slices.Contains(r.BrokerGroups, group) {
			n++
		}
	}
	return n
}

// untally takes one from code's tally, dropping the code at zero.
func untally(tally map[string]int, code string) {
	if tally[code]--; tally[code] <= 0 {
		delete(tally, code)
	}
}

// clone copies a record, its slices with it: records are never changed in
// place, since the table built from them is read without the state's lock.
func clone(a *auth.App) *auth.App {
	c := *a
	c.Secrets = slices.Clone(a.Secrets)
	c.Send = slices.Clone(a.Send)
	c.Consume = slices.Clone(a.Consume)
	return &c
}

// updated is stored with the rights, admin flag and limits of update, and
// stored's code and secrets.
func updated(stored, update *auth.App) *auth.App {
	a := clone(update)
	a.Code, a.Secrets = stored.Code, slices.Clone(stored.Secrets)
	return a
}

// setApp stores a as the record of code (nil: removes it) and rebuilds
// the table. A table auth.NewTable refuses, which admit's checks rule out,
// changes nothing.
func (s *state) setApp(code string, a *auth.App) error {
	next := maps.Clone(s.Apps)
	if next == nil {
		next = map[string]*auth.App{}
	}
	if a == nil {
		delete(next, code)
	} else {
		next[code] = a
	}
	t, err := appTable(next)
	if err != nil {
		return err
	}
	s.Apps, s.table = next, t
	return nil
}
