package meta

import (
	"fmt"
	"slices"
)

// admit reports why cmd would be refused by the state as it is, or nil:
// every refusal of apply, limits included, and nothing else. It reads only
// cmd and s, so every replica decides alike.
func (s *state) admit(cmd Command) error {
	switch c := cmd.(type) {
	case *Register, *Deregister, *Member, *ForgetConsumer:
	case *Assign:
		for _, g := range c.Groups {
			if s.Groups[g] == nil {
				return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, g)
			}
		}
	case *SetWritable:
		if s.Groups[c.Group] == nil {
			return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, c.Group)
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
		g := s.Groups[c.Group]
		if g == nil {
			g = &Group{Nodes: map[string]Node{}}
			s.Groups[c.Group] = g
		}
		g.Nodes[c.ID] = Node{RaftAddr: c.RaftAddr, ClientAddr: c.ClientAddr, HTTPAddr: c.HTTPAddr}
	case *Deregister:
		// Idempotent, so a retried request succeeds.
		if g := s.Groups[c.Group]; g != nil {
			delete(g.Nodes, c.ID)
			if len(g.Nodes) == 0 && s.routedTo(c.Group) == 0 {
				delete(s.Groups, c.Group)
			}
		}
	case *Assign:
		old := s.Subjects[c.Subject]
		if old != nil && c.IfNew {
			return nil // assigned meanwhile: the earlier assignment stands
		}
		r := &Route{}
		if old != nil {
			r = &Route{Groups: slices.Clone(old.Groups), Consumers: old.Consumers}
		}
		for _, g := range c.Groups {
			if !slices.Contains(r.Groups, g) {
				r.Groups = append(r.Groups, g)
				s.routed++
			}
		}
		s.Subjects[c.Subject] = r
	case *SetWritable:
		s.Groups[c.Group].ReadOnly = !c.Writable
	case *Consumer:
		r := s.Subjects[c.Subject]
		if i, found := slices.BinarySearch(r.Consumers, c.Group); !found {
			r.Consumers = slices.Insert(r.Consumers, i, c.Group)
			s.consumers++
		}
	case *ForgetConsumer:
		// Idempotent, so a retried request succeeds.
		if r := s.Subjects[c.Subject]; r != nil {
			if i, found := slices.BinarySearch(r.Consumers, c.Group); found {
				r.Consumers = slices.Delete(r.Consumers, i, i+1)
				s.consumers--
			}
		}
	case *Member:
		if c.ClientAddr == "" {
			delete(s.Members, c.ID)
		} else {
			s.Members[c.ID] = c.ClientAddr
		}
	}
	return nil
}

// routedTo counts the subjects routed to group.
func (s *state) routedTo(group string) int {
	n := 0
	for _, r := range s.Subjects {
		if slices.Contains(r.Groups, group) {
			n++
		}
	}
	return n
}
