package meta

import (
	"fmt"
	"slices"
)

// MaxConsumerGroups bounds the consumer groups recorded per subject.
const MaxConsumerGroups = 4096

// state is everything the metaserver replicates. It is also the snapshot,
// as JSON (whose maps are written in key order, so equal states give equal
// bytes).
type state struct {
	Groups   map[string]*Group `json:"groups"`
	Subjects map[string]*Route `json:"subjects"`
	Members  map[string]string `json:"members"` // metaserver node id → client address
}

// Group is a broker group as registered.
type Group struct {
	ReadOnly bool            `json:"readonly,omitempty"`
	Nodes    map[string]Node `json:"nodes"`
}

// Node is a registered broker node.
type Node struct {
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
}

// Route is a subject's broker groups, in the order they were assigned, and
// its known consumer groups, sorted.
type Route struct {
	Groups    []string `json:"groups"`
	Consumers []string `json:"consumers,omitempty"`
}

func newState() *state {
	return &state{Groups: map[string]*Group{}, Subjects: map[string]*Route{}, Members: map[string]string{}}
}

// check validates a state read from a snapshot, as strictly as commands.
func (s *state) check() error {
	if s.Groups == nil || s.Subjects == nil || s.Members == nil {
		return fmt.Errorf("%w: snapshot lacks groups, subjects or members", ErrInvalid)
	}
	for name, g := range s.Groups {
		if g == nil || g.Nodes == nil {
			return fmt.Errorf("%w: snapshot group %q is empty", ErrInvalid, name)
		}
		for id, n := range g.Nodes {
			r := Register{Group: name, ID: id, RaftAddr: n.RaftAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr}
			if err := r.check(); err != nil {
				return err
			}
		}
	}
	for subject, r := range s.Subjects {
		if r == nil {
			return fmt.Errorf("%w: snapshot route of %q is empty", ErrInvalid, subject)
		}
		a := Assign{Subject: subject, Groups: r.Groups}
		if err := a.check(); err != nil {
			return err
		}
		for _, g := range r.Groups {
			if s.Groups[g] == nil {
				return fmt.Errorf("%w: snapshot routes %s to unknown group %s", ErrInvalid, subject, g)
			}
		}
		if len(r.Consumers) > MaxConsumerGroups {
			return fmt.Errorf("%w: snapshot has %d consumer groups for %s", ErrInvalid, len(r.Consumers), subject)
		}
		for _, c := range r.Consumers {
			if err := checkName("consumer group", c); err != nil {
				return err
			}
		}
	}
	for id, addr := range s.Members {
		m := Member{ID: id, ClientAddr: addr}
		if err := m.check(); err != nil {
			return err
		}
	}
	return nil
}

func (s *state) apply(cmd any) error {
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
		for _, g := range c.Groups {
			if s.Groups[g] == nil {
				return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, g)
			}
		}
		old := s.Subjects[c.Subject]
		if old != nil && c.IfNew {
			return nil // assigned meanwhile: the earlier assignment stands
		}
		// Build the new route aside: a refused command changes nothing.
		r := &Route{}
		if old != nil {
			r = &Route{Groups: slices.Clone(old.Groups), Consumers: old.Consumers}
		}
		for _, g := range c.Groups {
			if !slices.Contains(r.Groups, g) {
				r.Groups = append(r.Groups, g)
			}
		}
		if len(r.Groups) > MaxGroupsPerSubject {
			return fmt.Errorf("%w: subject %s would have %d groups (at most %d)", ErrInvalid, c.Subject, len(r.Groups), MaxGroupsPerSubject)
		}
		s.Subjects[c.Subject] = r
	case *SetWritable:
		g := s.Groups[c.Group]
		if g == nil {
			return fmt.Errorf("%w: no broker group %s is registered", ErrInvalid, c.Group)
		}
		g.ReadOnly = !c.Writable
	case *Consumer:
		r := s.Subjects[c.Subject]
		if r == nil {
			return fmt.Errorf("%w: subject %s has no route", ErrInvalid, c.Subject)
		}
		i, found := slices.BinarySearch(r.Consumers, c.Group)
		if found {
			return nil
		}
		if len(r.Consumers) >= MaxConsumerGroups {
			return fmt.Errorf("%w: subject %s has %d consumer groups already", ErrInvalid, c.Subject, len(r.Consumers))
		}
		r.Consumers = slices.Insert(r.Consumers, i, c.Group)
	case *Member:
		if c.ClientAddr == "" {
			delete(s.Members, c.ID)
		} else {
			s.Members[c.ID] = c.ClientAddr
		}
	default:
		return fmt.Errorf("%w: command %T", ErrInvalid, cmd)
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
