package meta

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/version"
)

// state is everything the metaserver replicates. It is also the snapshot,
// as JSON (whose maps are written in key order, so equal states give equal
// bytes).
type state struct {
	BrokerGroups map[string]*BrokerGroup `json:"groups"`
	Subjects     map[string]*Route       `json:"subjects"`
	Members      map[string]string       `json:"members"` // metaserver node id → client address
	// Apps are the applications by code. A snapshot from before
	// applications has none (a nil map, taken for an empty one).
	Apps map[string]*auth.App `json:"apps,omitempty"`
	// Version is the group's active version Number (SetVersion); 0 (and
	// absent from the snapshot) in a state from before version gates,
	// which is at version.V1.
	Version version.Number `json:"version,omitempty"`

	// Tallies of the limits that span subjects, kept by apply and set by
	// check; not in the snapshot.
	routed    int // route entries of all subjects
	consumers int // consumer groups of all subjects
	// Per application code: the routes and the consumer groups recorded
	// as its (Route.App, Route.ConsumerApps). A code with none is absent.
	appSubjects map[string]int
	appGroups   map[string]int

	// table is Apps as nodes check requests against it, rebuilt by apply
	// after each change of Apps and by check; never nil once either ran.
	table *auth.Table
}

// BrokerGroup is a broker group as registered.
type BrokerGroup struct {
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
// its known consumer groups, sorted. App is the application that created
// the route ("" for none). ConsumerApps is empty while no consumer group
// of the subject was recorded by an application; otherwise it holds, for
// each of Consumers at the same index, the application that recorded it
// (or ""). A route that no application touched encodes as it did before
// applications existed.
type Route struct {
	BrokerGroups []string `json:"groups"`
	Consumers    []string `json:"consumers,omitempty"`
	App          string   `json:"app,omitempty"`
	ConsumerApps []string `json:"consumer_apps,omitempty"`
	// ConsumerHolders is empty while every consumer group of the subject is
	// declared; otherwise it holds, for each of Consumers at the same
	// index, the broker groups holding its provisional record, a bit each
	// by their index in Groups (0: declared). See Consumer.
	ConsumerHolders []uint64 `json:"consumer_holders,omitempty"`
}

func newState() *state {
	empty, _ := appTable(nil) // an empty table always builds
	return &state{BrokerGroups: map[string]*BrokerGroup{}, Subjects: map[string]*Route{}, Members: map[string]string{},
		appSubjects: map[string]int{}, appGroups: map[string]int{}, table: empty}
}

// check validates a state read from a snapshot, as strictly as commands
// and within the same limits, and sets its tallies.
func (s *state) check() error {
	if s.BrokerGroups == nil || s.Subjects == nil || s.Members == nil {
		return fmt.Errorf("%w: snapshot lacks groups, subjects or members", ErrInvalid)
	}
	if len(s.BrokerGroups) > MaxBrokerGroups {
		return overLimit("MaxBrokerGroups", MaxBrokerGroups, "snapshot has %d broker groups", len(s.BrokerGroups))
	}
	for name, g := range s.BrokerGroups {
		if g == nil || g.Nodes == nil {
			return fmt.Errorf("%w: snapshot group %q is empty", ErrInvalid, name)
		}
		if len(g.Nodes) > MaxNodesPerBrokerGroup {
			return overLimit("MaxNodesPerBrokerGroup", MaxNodesPerBrokerGroup, "snapshot has %d nodes in group %s", len(g.Nodes), name)
		}
		for id, n := range g.Nodes {
			r := Register{BrokerGroup: name, ID: id, RaftAddr: n.RaftAddr, ClientAddr: n.ClientAddr, HTTPAddr: n.HTTPAddr}
			if err := r.check(); err != nil {
				return err
			}
		}
	}
	if len(s.Subjects) > MaxRoutedSubjects {
		return overLimit("MaxSubjects", MaxRoutedSubjects, "snapshot has %d subjects", len(s.Subjects))
	}
	routed, consumers := 0, 0
	appSubjects, appGroups := map[string]int{}, map[string]int{}
	for subject, r := range s.Subjects {
		if r == nil {
			return fmt.Errorf("%w: snapshot route of %q is empty", ErrInvalid, subject)
		}
		a := Assign{Subject: subject, BrokerGroups: r.BrokerGroups}
		if err := a.check(); err != nil {
			return err
		}
		for i, g := range r.BrokerGroups {
			if s.BrokerGroups[g] == nil {
				return fmt.Errorf("%w: snapshot routes %s to unknown group %s", ErrInvalid, subject, g)
			}
			if slices.Contains(r.BrokerGroups[:i], g) {
				return fmt.Errorf("%w: snapshot routes %s to group %s twice", ErrInvalid, subject, g)
			}
		}
		if len(r.Consumers) > MaxConsumerGroupsPerSubject {
			return overLimit("MaxConsumerGroups", MaxConsumerGroupsPerSubject, "snapshot has %d consumer groups for %s", len(r.Consumers), subject)
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
		if err := checkAppName(r.App); err != nil {
			return err
		}
		if r.App != "" {
			appSubjects[r.App]++
		}
		if len(r.ConsumerApps) == 0 {
			r.ConsumerApps = nil // as apply keeps it: nil while no group has one
		}
		if r.ConsumerApps != nil && len(r.ConsumerApps) != len(r.Consumers) {
			return fmt.Errorf("%w: snapshot's route of %s names the applications of %d consumer groups, not %d", ErrInvalid, subject, len(r.ConsumerApps), len(r.Consumers))
		}
		for _, app := range r.ConsumerApps {
			if err := checkAppName(app); err != nil {
				return err
			}
			if app != "" {
				appGroups[app]++
			}
		}
		if len(r.ConsumerHolders) == 0 {
			r.ConsumerHolders = nil // as apply keeps it: nil while every group is declared
		}
		if r.ConsumerHolders != nil && len(r.ConsumerHolders) != len(r.Consumers) {
			return fmt.Errorf("%w: snapshot's route of %s names the holders of %d consumer groups, not %d", ErrInvalid, subject, len(r.ConsumerHolders), len(r.Consumers))
		}
		for _, h := range r.ConsumerHolders {
			if h>>len(r.BrokerGroups) != 0 {
				return fmt.Errorf("%w: snapshot's route of %s has %d groups, a consumer group is held by group %d", ErrInvalid, subject, len(r.BrokerGroups), bits.Len64(h)-1)
			}
		}
		routed += len(r.BrokerGroups)
		consumers += len(r.Consumers)
	}
	if routed > MaxRoutedBrokerGroups {
		return overLimit("MaxRoutedBrokerGroups", MaxRoutedBrokerGroups, "snapshot's routes hold %d groups", routed)
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
	table, err := s.checkApps()
	if err != nil {
		return err
	}
	s.routed, s.consumers = routed, consumers
	s.appSubjects, s.appGroups, s.table = appSubjects, appGroups, table
	return nil
}

// checkApps checks a snapshot's applications, each record as auth.App.Check
// does, and returns their table.
func (s *state) checkApps() (*auth.Table, error) {
	if len(s.Apps) > auth.MaxApps {
		return nil, overLimit("MaxApps", auth.MaxApps, "snapshot has %d applications", len(s.Apps))
	}
	for code, a := range s.Apps {
		if a == nil || a.Code != code {
			return nil, fmt.Errorf("%w: snapshot's application %q is empty or under another code", ErrInvalid, code)
		}
		if err := a.Check(); err != nil {
			return nil, checkAuth(err)
		}
	}
	return appTable(s.Apps)
}

// appTable builds the table of apps. Every table of the state is built
// here, so that equal applications give equal versions (an empty table's
// included: auth.NewTable hashes a nil list and an empty one apart).
func appTable(apps map[string]*auth.App) (*auth.Table, error) {
	records := make([]auth.App, 0, len(apps))
	for _, a := range apps {
		records = append(records, *a)
	}
	t, err := auth.NewTable(records)
	return t, checkAuth(err)
}
