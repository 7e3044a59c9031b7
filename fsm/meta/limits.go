package meta

import (
	"fmt"
	"slices"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/limits"
)

// The limits on the replicated state. Restore refuses a snapshot over
// maxSnapshot (512 MiB), and Raft restores the last snapshot on start-up:
// a state that outgrew it would leave the metaserver unable to start. So
// every collection a client can grow has a bound, and the largest state
// the bounds allow encodes to under a quarter of maxSnapshot, with every
// name at limits.MaxName (200 bytes) and every address at maxAddrLen (255
// bytes) of characters JSON escapes as \u00XX (6 bytes each: 1,530 at
// most). In bytes of the snapshot's JSON, a name taking 203 with its
// quotes and a colon or comma:
//
//	a broker node      "ID":{"raft_addr":"…","client_addr":"…","http_addr":"…"},
//	                   203 + 49 + 3 × 1,530                        =      4,842
//	a broker group     "NAME":{"readonly":true,"nodes":{…}},   232 + its nodes
//	all groups         256 MaxBrokerGroups × (232 + 16 MaxNodesPerBrokerGroup × 4,842)
//	                   = 256 × 77,704                              = 19,892,224
//	a subject          "NAME":{"groups":[…],"consumers":[…],"app":"APP","consumer_apps":[…]},
//	                   232 + 209 (its application) + 19 + its lists
//	all subjects       40,000 MaxRoutedSubjects × 460              = 18,400,000
//	route entries      "GROUP",  80,000 MaxRoutedBrokerGroups × 203 = 16,240,000
//	consumer groups    "NAME", its application's "APP", and its holders
//	                   (a uint64: 20 digits and a comma), with each
//	                   subject's "consumer_holders":[] (22 bytes),
//	                   80,000 MaxTotalConsumerGroups × 427
//	                   + 40,000 MaxRoutedSubjects × 22            = 35,040,000
//	members            "ID":"ADDR",  32 MaxMembers × 1,736         =     55,552
//	an application     "CODE":{"code":"CODE","admin":true,"secrets":[…],
//	                   "consume":[…],"max_subjects":…,"max_groups":…,
//	                   "max_consumers":…,"max_delayed":…},
//	                   203 + 211 + 13 + 2 secrets of at most 148
//	                   {"salt":"…","hash":"…","expires":…}, + 113 the rest
//	                   + 32 auth.MaxRules consume rules of two 201-byte patterns
//	                   {"subject":"…*","group":"…*"}, of 428    =     14,532
//	all applications   512 auth.MaxApps × 14,532                   =  7,440,384
//	the rest           {"applied":…,"state":{"groups":…}}          <        100
//	total                                                          < 97,068,260
//
// 97.1 MB is 92.6 MiB, under a quarter of maxSnapshot (128 MiB);
// TestLargestStateRestores builds that state and restores it. (Before
// applications the total was 58.9 MiB, under a quarter of the 256 MiB
// maxSnapshot was then.) Counts, not bytes, are bounded, so that a refusal
// is plain to explain and every replica decides it alike. For scale:
// 100,000 subjects routed to 16 groups each would take 100,000 × (232 + 16
// × 203) = 348 MB of routes alone, two thirds of maxSnapshot.
//
// A limit may be raised in a later release (with maxSnapshot if need be),
// never lowered: a state that holds more than a lowered limit would no
// longer restore. auth.MaxApps bounds the applications (PutApp past it is
// refused with ErrLimit naming MaxApps); each application's own limits
// (auth.App.SubjectLimit and GroupLimit) bound the routes and consumer
// groups recorded as its, which the limits above bound already.
const (
	// MaxBrokerGroups bounds the registered broker groups.
	MaxBrokerGroups = 256
	// MaxNodesPerBrokerGroup bounds the registered nodes of one broker group. A
	// node replaced under a new id stays registered until deregistered.
	MaxNodesPerBrokerGroup = 16
	// MaxRoutedSubjects bounds the subjects with a route, over all broker
	// groups: the metaserver's table of routes. A route is created on a
	// subject's first use and never removed. (What one broker group holds
	// of them is limits.MaxSubjectsPerBrokerGroup's.) Its errors name it
	// MaxSubjects, as operators know it (docs/operations.md).
	MaxRoutedSubjects = 40_000
	// MaxBrokerGroupsPerSubject bounds one route.
	MaxBrokerGroupsPerSubject = 64
	// MaxRoutedBrokerGroups bounds the route entries of all subjects together
	// (the sum of their groups): two per subject on average, the default
	// a subject is assigned on first use.
	MaxRoutedBrokerGroups = 80_000
	// MaxConsumerGroupsPerSubject bounds the consumer groups recorded for
	// one subject: as many as a broker group keeps of it. (What a broker
	// group keeps of all subjects is limits.MaxConsumerGroups.) Its errors
	// name it MaxConsumerGroups, as operators know it (docs/operations.md).
	MaxConsumerGroupsPerSubject = limits.MaxConsumerGroupsPerSubject
	// MaxTotalConsumerGroups bounds the consumer groups recorded of all
	// subjects together (a group consuming two subjects counts twice).
	MaxTotalConsumerGroups = 80_000
	// MaxMembers bounds the metaserver nodes whose client address is
	// recorded.
	MaxMembers = 32
)

// ErrLimit means a command would take the state past one of the limits
// above. It wraps ErrInvalid: the command changes nothing, and retrying it
// fails alike until something is forgotten.
var ErrLimit = fmt.Errorf("%w: limit reached", ErrInvalid)

// ErrAppLimit means a command would take an application past its own
// limits (auth.App.SubjectLimit, GroupLimit). It wraps ErrLimit.
var ErrAppLimit = fmt.Errorf("%w (an application's)", ErrLimit)

// overLimit is the error of a command that would pass limit, named name.
func overLimit(name string, limit int, format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s is %d", ErrLimit, fmt.Sprintf(format, args...), name, limit)
}

// overAppLimit is the error of a command that would pass an application's
// limit, named name.
func overAppLimit(name string, limit int, format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s is %d", ErrAppLimit, fmt.Sprintf(format, args...), name, limit)
}

// limits reports whether applying cmd would take s past a limit. It reads
// only cmd and s, so every replica decides alike; Apply and the server's
// check before proposing both call it.
func (s *state) limits(cmd Command) error {
	switch c := cmd.(type) {
	case *Register:
		g := s.BrokerGroups[c.BrokerGroup]
		if g == nil {
			if len(s.BrokerGroups) >= MaxBrokerGroups {
				return overLimit("MaxBrokerGroups", MaxBrokerGroups, "%d broker groups are registered, group %s would be one more", len(s.BrokerGroups), c.BrokerGroup)
			}
			return nil
		}
		if _, ok := g.Nodes[c.ID]; !ok && len(g.Nodes) >= MaxNodesPerBrokerGroup {
			return overLimit("MaxNodesPerBrokerGroup", MaxNodesPerBrokerGroup, "broker group %s has %d registered nodes, node %s would be one more (deregister nodes that left)", c.BrokerGroup, len(g.Nodes), c.ID)
		}
	case *Assign:
		old := s.Subjects[c.Subject]
		if old != nil && c.IfNew {
			return nil
		}
		var have []string
		if old != nil {
			have = old.BrokerGroups
		}
		added := 0
		for i, g := range c.BrokerGroups {
			if !slices.Contains(have, g) && !slices.Contains(c.BrokerGroups[:i], g) {
				added++
			}
		}
		if n := len(have) + added; n > MaxBrokerGroupsPerSubject {
			return overLimit("MaxBrokerGroupsPerSubject", MaxBrokerGroupsPerSubject, "subject %s would have %d groups", c.Subject, n)
		}
		if old == nil && len(s.Subjects) >= MaxRoutedSubjects {
			return overLimit("MaxSubjects", MaxRoutedSubjects, "%d subjects have a route, subject %s would be one more", len(s.Subjects), c.Subject)
		}
		if s.routed+added > MaxRoutedBrokerGroups {
			return overLimit("MaxRoutedBrokerGroups", MaxRoutedBrokerGroups, "routes hold %d groups in all, subject %s would add %d", s.routed, c.Subject, added)
		}
		if a := s.Apps[c.App]; old == nil && a != nil && s.appSubjects[c.App] >= a.SubjectLimit() {
			return overAppLimit(fmt.Sprintf("application %s's max subjects", c.App), a.SubjectLimit(),
				"application %s created %d subjects, subject %s would be one more", c.App, s.appSubjects[c.App], c.Subject)
		}
	case *Consumer:
		r := s.Subjects[c.Subject]
		if r == nil {
			return nil // refused for want of a route
		}
		if _, found := slices.BinarySearch(r.Consumers, c.ConsumerGroup); found {
			return nil
		}
		if len(r.Consumers) >= MaxConsumerGroupsPerSubject {
			return overLimit("MaxConsumerGroups", MaxConsumerGroupsPerSubject, "subject %s has %d consumer groups, %s would be one more", c.Subject, len(r.Consumers), c.ConsumerGroup)
		}
		if s.consumers >= MaxTotalConsumerGroups {
			return overLimit("MaxTotalConsumerGroups", MaxTotalConsumerGroups, "%d consumer groups are recorded in all, %s of subject %s would be one more", s.consumers, c.ConsumerGroup, c.Subject)
		}
		if a := s.Apps[c.App]; a != nil && s.appGroups[c.App] >= a.GroupLimit() {
			return overAppLimit(fmt.Sprintf("application %s's max groups", c.App), a.GroupLimit(),
				"application %s created %d consumer groups, %s of subject %s would be one more", c.App, s.appGroups[c.App], c.ConsumerGroup, c.Subject)
		}
	case *PutApp:
		if c.Create && s.Apps[c.App.Code] == nil && len(s.Apps) >= auth.MaxApps {
			return overLimit("MaxApps", auth.MaxApps, "%d applications exist, %s would be one more", len(s.Apps), c.App.Code)
		}
	case *Member:
		if _, ok := s.Members[c.ID]; !ok && c.ClientAddr != "" && len(s.Members) >= MaxMembers {
			return overLimit("MaxMembers", MaxMembers, "%d metaserver nodes are recorded, node %s would be one more", len(s.Members), c.ID)
		}
	}
	return nil
}
