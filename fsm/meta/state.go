package meta

import (
	"fmt"
	"slices"
	"strings"
)

// state is everything the metaserver replicates. It is also the snapshot,
// as JSON (whose maps are written in key order, so equal states give equal
// bytes).
type state struct {
	Groups   map[string]*Group `json:"groups"`
	Subjects map[string]*Route `json:"subjects"`
	Members  map[string]string `json:"members"` // metaserver node id → client address

	// Tallies of the limits that span subjects, kept by apply and set by
	// check; not in the snapshot.
	routed    int // route entries of all subjects
	consumers int // consumer groups of all subjects
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

// check validates a state read from a snapshot, as strictly as commands
// and within the same limits, and sets its tallies.
func (s *state) check() error {
	if s.Groups == nil || s.Subjects == nil || s.Members == nil {
		return fmt.Errorf("%w: snapshot lacks groups, subjects or members", ErrInvalid)
	}
	if len(s.Groups) > MaxBrokerGroups {
		return overLimit("MaxBrokerGroups", MaxBrokerGroups, "snapshot has %d broker groups", len(s.Groups))
	}
	for name, g := range s.Groups {
		if g == nil || g.Nodes == nil {
			return fmt.Errorf("%w: snapshot group %q is empty", ErrInvalid, name)
		}
		if len(g.Nodes) > MaxNodesPerGroup {
			return overLimit("MaxNodesPerGroup", MaxNodesPerGroup, "snapshot has %d nodes in group %s", len(g.Nodes), name)
		}
		for id, n := range g.Nodes {
			r := Register{Group: name, ID: id, RaftAddr: n.RaftAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr}
			if err := r.check(); err != nil {
				return err
			}
		}
	}
	if len(s.Subjects) > MaxSubjects {
		return overLimit("MaxSubjects", MaxSubjects, "snapshot has %d subjects", len(s.Subjects))
	}
	routed, consumers := 0, 0
	for subject, r := range s.Subjects {
		if r == nil {
			return fmt.Errorf("%w: snapshot route of %q is empty", ErrInvalid, subject)
		}
		a := Assign{Subject: subject, Groups: r.Groups}
		if err := a.check(); err != nil {
			return err
		}
		for i, g := range r.Groups {
			if s.Groups[g] == nil {
				return fmt.Errorf("%w: snapshot routes %s to unknown group %s", ErrInvalid, subject, g)
			}
			if slices.Contains(r.Groups[:i], g) {
				return fmt.Errorf("%w: snapshot routes %s to group %s twice", ErrInvalid, subject, g)
			}
		}
		if len(r.Consumers) > MaxConsumerGroups {
			return overLimit("MaxConsumerGroups", MaxConsumerGroups, "snapshot has %d consumer groups for %s", len(r.Consumers), subject)
		}
		for i, c := range r.Consumers {
			if err := checkName("consumer group", c); err != nil {
				return err
			}
			// Sorted and unique, as apply keeps them: it searches them.
			if i > 0 && strings.Compare(r.Consumers[i-1], c) >= 0 {
				return fmt.Errorf("%w: snapshot's consumer groups of %s are not sorted and unique", ErrInvalid, subject)
			}
		}
		routed += len(r.Groups)
		consumers += len(r.Consumers)
	}
	if routed > MaxRoutedGroups {
		return overLimit("MaxRoutedGroups", MaxRoutedGroups, "snapshot's routes hold %d groups", routed)
	}
	if consumers > MaxTotalConsumerGroups {
		return overLimit("MaxTotalConsumerGroups", MaxTotalConsumerGroups, "snapshot has %d consumer groups", consumers)
	}
	if len(s.Members) > MaxMembers {
		return overLimit("MaxMembers", MaxMembers, "snapshot has %d metaserver nodes", len(s.Members))
	}
	for id, addr := range s.Members {
		m := Member{ID: id, ClientAddr: addr}
		if err := m.check(); err != nil {
			return err
		}
	}
	s.routed, s.consumers = routed, consumers
	return nil
}
