package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/limits"
)

// longName is a valid name of n bytes, distinct for each i, sorting in i's
// order.
func longName(prefix byte, i, n int) string { return fmt.Sprintf("%c%0*d", prefix, n-1, i) }

// escapedAddr is an address of maxAddrLen bytes that JSON writes 6 bytes a
// character (\u003c) but for its colon: the longest an address can encode
// to (SplitHostPort checks neither the host's characters nor the port's).
var escapedAddr = strings.Repeat("<", maxAddrLen-2) + ":<"

// largestState is a state at every limit at once, every name and address
// as long as allowed.
func largestState(t *testing.T) *state {
	t.Helper()
	s := newState()
	var groups []string
	for i := range MaxBrokerGroups {
		g := &BrokerGroup{ReadOnly: true, Nodes: map[string]Node{}}
		for j := range MaxNodesPerBrokerGroup {
			g.Nodes[longName('n', j, limits.MaxName)] = Node{RaftAddr: escapedAddr, ClientAddr: escapedAddr, HTTPAddr: escapedAddr}
		}
		name := longName('g', i, limits.MaxName)
		s.BrokerGroups[name] = g
		groups = append(groups, name)
	}
	apps := largestApps()
	s.Apps = map[string]*auth.App{}
	for i := range apps {
		s.Apps[apps[i].Code] = &apps[i]
	}
	// Route entries and consumer groups spread over every subject, so that
	// each subject writes both of its lists, and each route and consumer
	// group recorded as an application's.
	next := 0
	for i := range MaxRoutedSubjects {
		r := &Route{App: apps[i%len(apps)].Code}
		for range share(MaxRoutedBrokerGroups, MaxRoutedSubjects, i) {
			r.BrokerGroups = append(r.BrokerGroups, groups[next%len(groups)])
			next++
		}
		for j := range share(MaxTotalConsumerGroups, MaxRoutedSubjects, i) {
			r.Consumers = append(r.Consumers, longName('c', j, limits.MaxName))
			r.ConsumerApps = append(r.ConsumerApps, apps[(i+j)%len(apps)].Code)
			r.ConsumerHolders = append(r.ConsumerHolders, 1<<len(r.BrokerGroups)-1)
		}
		s.Subjects[longName('s', i, limits.MaxName)] = r
	}
	for i := range MaxMembers {
		s.Members[longName('m', i, limits.MaxName)] = escapedAddr
	}
	if err := s.check(); err != nil {
		t.Fatalf("the largest state does not check: %v", err)
	}
	if s.routed != MaxRoutedBrokerGroups || s.consumers != MaxTotalConsumerGroups {
		t.Fatalf("largest state holds %d route entries and %d consumer groups", s.routed, s.consumers)
	}
	if s.table.Len() != auth.MaxApps {
		t.Fatalf("largest state's table holds %d applications", s.table.Len())
	}
	return s
}

// largestApps returns auth.MaxApps applications each at its largest:
// admin, two secrets the older expiring as late as can be, the most rules
// (consume rules, the longer kind) of the longest patterns, and the
// highest limits.
func largestApps() []auth.App {
	pattern := func(prefix byte, i int) string { return longName(prefix, i, limits.MaxName) + "*" }
	apps := make([]auth.App, auth.MaxApps)
	for i := range apps {
		old := rightsOnly
		old.Expires = math.MaxInt64
		a := auth.App{Code: longName('a', i, limits.MaxName), Admin: true, Secrets: []auth.Secret{rightsOnly, old},
			MaxSubjects: auth.MaxPerApp, MaxGroups: auth.MaxPerApp, MaxConsumers: limits.MaxConsumers, MaxDelayed: limits.MaxDelayed}
		for j := range auth.MaxRules {
			a.Consume = append(a.Consume, auth.Grant{Subject: pattern('s', j), Group: pattern('g', j)})
		}
		apps[i] = a
	}
	return apps
}

// TestLargestTableFitsAFrame: the table of the largest applications, as
// brokers receive it (its records' JSON), fits a frame with room for the
// heartbeat reply around it.
func TestLargestTableFitsAFrame(t *testing.T) {
	apps := largestApps()
	if _, err := auth.NewTable(apps); err != nil {
		t.Fatalf("the largest applications do not make a table: %v", err)
	}
	b, err := json.Marshal(apps)
	if err != nil {
		t.Fatal(err)
	}
	const room = 64 << 10 // a heartbeat reply's other fields, its status and the frame's header
	t.Logf("the largest table is %d bytes (%.1f MiB)", len(b), float64(len(b))/(1<<20))
	if len(b)+room > limits.MaxFrame {
		t.Fatalf("the largest table is %d bytes: with %d of room it does not fit a frame of %d", len(b), room, limits.MaxFrame)
	}
}

// share is subject i's part of total spread over n subjects.
func share(total, n, i int) int {
	if i < total%n {
		return total/n + 1
	}
	return total / n
}

func TestLargestStateRestores(t *testing.T) {
	f := &FSM{s: largestState(t), applied: math.MaxUint64}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	t.Logf("the largest state's snapshot is %d bytes (%.1f MiB)", s.Len(), float64(s.Len())/(1<<20))
	if s.Len() >= maxSnapshot/4 {
		t.Fatalf("the largest state's snapshot is %d bytes, not under a quarter of %d", s.Len(), maxSnapshot)
	}
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatalf("the largest state does not restore: %v", err)
	}
	// At every limit at once, whatever would grow the state is refused. The
	// entries carry the restored index, so that the snapshot after them is
	// byte for byte the one restored if they changed nothing.
	group, subject := longName('g', 0, limits.MaxName), longName('s', 0, limits.MaxName)
	for _, cmd := range []Command{
		&Register{BrokerGroup: "new", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"},
		&Register{BrokerGroup: group, ID: "new", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"},
		&Assign{Subject: "new", BrokerGroups: []string{group}},
		&Assign{Subject: subject, BrokerGroups: []string{longName('g', 100, limits.MaxName)}},
		&Consumer{Subject: subject, ConsumerGroup: "new"},
		&Member{ID: "new", ClientAddr: "127.0.0.1:9"},
		&PutApp{App: auth.App{Code: "new", Secrets: []auth.Secret{rightsOnly}}, Create: true},
	} {
		res := g.Apply(&raft.Log{Index: math.MaxUint64, Type: raft.LogCommand, Data: Encode(cmd)})
		if err, _ := res.(error); !errors.Is(err, ErrLimit) {
			t.Errorf("%T at every limit: %v, want ErrLimit", cmd, res)
		}
	}
	if !bytes.Equal(snapshotBytes(t, g), s.Bytes()) {
		t.Fatal("the restored state differs, or refused commands changed it")
	}
}

// limitCase is one limit: a state one short of it, a command that reaches
// it, one that would pass it, commands still accepted at it, and how to
// push a state one past it behind Apply's back.
type limitCase struct {
	name  string
	limit int
	build func(s *state)
	under Command
	over  Command
	still []Command
	past  func(s *state)
}

func addGroups(s *state, n int) {
	for i := range n {
		s.BrokerGroups[fmt.Sprintf("g%d", i)] = &BrokerGroup{Nodes: map[string]Node{"a": {RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}}}
	}
}

func register(group, id string) *Register {
	return &Register{BrokerGroup: group, ID: id, RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
}

func limitCases() []limitCase {
	return []limitCase{{
		name: "MaxBrokerGroups", limit: MaxBrokerGroups,
		build: func(s *state) { addGroups(s, MaxBrokerGroups-1) },
		under: register("under", "a"),
		over:  register("over", "a"),
		still: []Command{register("g0", "b"), &Deregister{BrokerGroup: "g1", ID: "a"}, register("over", "a")},
		past:  func(s *state) { s.BrokerGroups["past"] = &BrokerGroup{Nodes: map[string]Node{}} },
	}, {
		name: "MaxNodesPerBrokerGroup", limit: MaxNodesPerBrokerGroup,
		build: func(s *state) {
			addGroups(s, 2)
			for i := range MaxNodesPerBrokerGroup - 1 {
				s.BrokerGroups["g0"].Nodes[fmt.Sprintf("n%d", i)] = Node{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
			}
			delete(s.BrokerGroups["g0"].Nodes, "a")
		},
		under: register("g0", "under"),
		over:  register("g0", "over"),
		still: []Command{
			&Register{BrokerGroup: "g0", ID: "n0", RaftAddr: "127.0.0.1:7", ClientAddr: "127.0.0.1:8"},
			register("g1", "over"), &Deregister{BrokerGroup: "g0", ID: "n1"}, register("g0", "over"),
		},
		past: func(s *state) {
			s.BrokerGroups["g0"].Nodes["past"] = Node{RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
		},
	}, {
		name: "MaxSubjects", limit: MaxRoutedSubjects,
		build: func(s *state) {
			addGroups(s, 2)
			for i := range MaxRoutedSubjects - 1 {
				s.Subjects[fmt.Sprintf("s%d", i)] = &Route{BrokerGroups: []string{"g0"}}
			}
		},
		under: &Assign{Subject: "under", BrokerGroups: []string{"g0"}, IfNew: true},
		over:  &Assign{Subject: "over", BrokerGroups: []string{"g0"}, IfNew: true},
		still: []Command{
			&Assign{Subject: "s0", BrokerGroups: []string{"g1"}, IfNew: true},
			&Assign{Subject: "s0", BrokerGroups: []string{"g1"}},
			&Consumer{Subject: "s0", ConsumerGroup: "c"},
		},
		past: func(s *state) { s.Subjects["past"] = &Route{BrokerGroups: []string{"g0"}} },
	}, {
		name: "MaxBrokerGroupsPerSubject", limit: MaxBrokerGroupsPerSubject,
		build: func(s *state) {
			addGroups(s, MaxBrokerGroupsPerSubject+1)
			r := &Route{}
			for i := range MaxBrokerGroupsPerSubject - 1 {
				r.BrokerGroups = append(r.BrokerGroups, fmt.Sprintf("g%d", i))
			}
			s.Subjects["s"] = r
		},
		under: &Assign{Subject: "s", BrokerGroups: []string{"g0", fmt.Sprintf("g%d", MaxBrokerGroupsPerSubject-1)}},
		over:  &Assign{Subject: "s", BrokerGroups: []string{fmt.Sprintf("g%d", MaxBrokerGroupsPerSubject)}},
		still: []Command{&Assign{Subject: "s", BrokerGroups: []string{"g0", "g1"}}},
		past: func(s *state) {
			s.Subjects["s"].BrokerGroups = append(s.Subjects["s"].BrokerGroups, fmt.Sprintf("g%d", MaxBrokerGroupsPerSubject))
		},
	}, {
		name: "MaxRoutedBrokerGroups", limit: MaxRoutedBrokerGroups,
		build: func(s *state) {
			addGroups(s, MaxBrokerGroupsPerSubject)
			for i := range MaxRoutedBrokerGroups / MaxBrokerGroupsPerSubject {
				r := &Route{}
				for j := range MaxBrokerGroupsPerSubject {
					r.BrokerGroups = append(r.BrokerGroups, fmt.Sprintf("g%d", j))
				}
				s.Subjects[fmt.Sprintf("s%d", i)] = r
			}
			r := s.Subjects["s0"]
			r.BrokerGroups = r.BrokerGroups[:len(r.BrokerGroups)-1]
			if MaxRoutedBrokerGroups%MaxBrokerGroupsPerSubject != 0 {
				panic("MaxRoutedBrokerGroups is not a multiple of MaxBrokerGroupsPerSubject: rewrite this case")
			}
		},
		under: &Assign{Subject: "s0", BrokerGroups: []string{"g0", fmt.Sprintf("g%d", MaxBrokerGroupsPerSubject-1)}},
		over:  &Assign{Subject: "over", BrokerGroups: []string{"g0"}},
		still: []Command{&Assign{Subject: "s1", BrokerGroups: []string{"g0", "g1"}}, &Assign{Subject: "s1", BrokerGroups: []string{"g0"}, IfNew: true}},
		past:  func(s *state) { s.Subjects["past"] = &Route{BrokerGroups: []string{"g0"}} },
	}, {
		name: "MaxConsumerGroups", limit: MaxConsumerGroupsPerSubject,
		build: func(s *state) {
			addGroups(s, 1)
			r := &Route{BrokerGroups: []string{"g0"}}
			for i := range MaxConsumerGroupsPerSubject - 1 {
				r.Consumers = append(r.Consumers, fmt.Sprintf("c%05d", i))
			}
			s.Subjects["s"] = r
			s.Subjects["t"] = &Route{BrokerGroups: []string{"g0"}}
		},
		under: &Consumer{Subject: "s", ConsumerGroup: "under"},
		over:  &Consumer{Subject: "s", ConsumerGroup: "over"},
		still: []Command{
			&Consumer{Subject: "s", ConsumerGroup: "c00000"}, &Consumer{Subject: "t", ConsumerGroup: "over"},
			&ForgetConsumer{Subject: "s", ConsumerGroup: "c00001"}, &Consumer{Subject: "s", ConsumerGroup: "over"},
		},
		past: func(s *state) { s.Subjects["s"].Consumers = append(s.Subjects["s"].Consumers, "zz") },
	}, {
		name: "MaxTotalConsumerGroups", limit: MaxTotalConsumerGroups,
		build: func(s *state) {
			addGroups(s, 1)
			const per = 4000
			if MaxTotalConsumerGroups%per != 0 || per >= MaxConsumerGroupsPerSubject {
				panic("MaxTotalConsumerGroups does not split in 4000s: rewrite this case")
			}
			for i := range MaxTotalConsumerGroups / per {
				r := &Route{BrokerGroups: []string{"g0"}}
				for j := range per {
					r.Consumers = append(r.Consumers, fmt.Sprintf("c%05d", j))
				}
				s.Subjects[fmt.Sprintf("s%d", i)] = r
			}
			r := s.Subjects["s0"]
			r.Consumers = r.Consumers[:len(r.Consumers)-1]
			s.Subjects["empty"] = &Route{BrokerGroups: []string{"g0"}}
		},
		under: &Consumer{Subject: "s0", ConsumerGroup: "under"},
		over:  &Consumer{Subject: "empty", ConsumerGroup: "over"},
		still: []Command{
			&Consumer{Subject: "s1", ConsumerGroup: "c00000"},
			&ForgetConsumer{Subject: "s1", ConsumerGroup: "unknown"},
			&ForgetConsumer{Subject: "unknown", ConsumerGroup: "c00000"},
			// The way out: forget one, and there is room for another.
			&ForgetConsumer{Subject: "s1", ConsumerGroup: "c00000"}, &Consumer{Subject: "empty", ConsumerGroup: "over"},
		},
		past: func(s *state) { s.Subjects["empty"].Consumers = []string{"past"} },
	}, {
		name: "MaxMembers", limit: MaxMembers,
		build: func(s *state) {
			for i := range MaxMembers - 1 {
				s.Members[fmt.Sprintf("m%d", i)] = "127.0.0.1:9"
			}
		},
		under: &Member{ID: "under", ClientAddr: "127.0.0.1:9"},
		over:  &Member{ID: "over", ClientAddr: "127.0.0.1:9"},
		still: []Command{
			&Member{ID: "m0", ClientAddr: "127.0.0.1:10"}, &Member{ID: "over"},
			&Member{ID: "m1"}, &Member{ID: "over", ClientAddr: "127.0.0.1:9"},
		},
		past: func(s *state) { s.Members["past"] = "127.0.0.1:9" },
	}, {
		name: "MaxApps", limit: auth.MaxApps,
		build: func(s *state) {
			s.Apps = map[string]*auth.App{}
			for i := range auth.MaxApps - 1 {
				code := fmt.Sprintf("a%d", i)
				s.Apps[code] = &auth.App{Code: code, Secrets: []auth.Secret{rightsOnly}}
			}
		},
		under: &PutApp{App: auth.App{Code: "under", Secrets: []auth.Secret{rightsOnly}}, Create: true},
		over:  &PutApp{App: auth.App{Code: "over", Secrets: []auth.Secret{rightsOnly}}, Create: true},
		still: []Command{
			&PutApp{App: auth.App{Code: "a0", Admin: true}},
			&RotateApp{Code: "a0", Secret: rightsOnly, OldExpires: 1},
			&DeleteApp{Code: "over"}, &DeleteApp{Code: "a1"},
			&PutApp{App: auth.App{Code: "over", Secrets: []auth.Secret{rightsOnly}}, Create: true},
		},
		past: func(s *state) { s.Apps["past"] = &auth.App{Code: "past", Secrets: []auth.Secret{rightsOnly}} },
	}}
}

// TestLimits: for each limit, a command that reaches it is accepted, one
// that would pass it is refused (by Apply and by FSM.Check alike, naming
// the limit and its figure) and changes nothing, commands that do not grow
// past it are still accepted, and a snapshot past it does not restore.
func TestLimits(t *testing.T) {
	for _, c := range limitCases() {
		t.Run(c.name, func(t *testing.T) {
			s := newState()
			c.build(s)
			if err := s.check(); err != nil {
				t.Fatalf("state one short of the limit: %v", err)
			}
			f := &FSM{s: s}
			if err := f.Check(c.under); err != nil {
				t.Fatalf("check of %+v one short of the limit: %v", c.under, err)
			}
			mustApply(t, f, c.under)
			atLimit := snapshotBytes(t, f)
			if err := New().Restore(io.NopCloser(bytes.NewReader(atLimit))); err != nil {
				t.Fatalf("a state at the limit does not restore: %v", err)
			}

			before := stateBytes(t, f)
			want := fmt.Sprintf("%s is %d", c.name, c.limit)
			checked := f.Check(c.over)
			if !errors.Is(checked, ErrLimit) || !strings.Contains(checked.Error(), want) {
				t.Fatalf("check of %+v at the limit: %v, want ErrLimit naming %q", c.over, checked, want)
			}
			err := apply(t, f, c.over)
			if !errors.Is(err, ErrLimit) || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
				t.Fatalf("%+v at the limit: %v, want ErrLimit naming %q", c.over, err, want)
			}
			if err.Error() != checked.Error() {
				t.Errorf("apply refused with %q, check with %q", err, checked)
			}
			if after := stateBytes(t, f); !bytes.Equal(before, after) {
				t.Fatal("the refused command changed the state")
			}
			for _, cmd := range c.still {
				if err := apply(t, f, cmd); err != nil {
					t.Fatalf("%T %+v at the limit: %v", cmd, cmd, err)
				}
			}
			if _, err := decodeSnapshot(snapshotBytes(t, f)); err != nil {
				t.Fatalf("the state after the accepted commands does not restore: %v", err)
			}

			past := &FSM{s: newState()}
			c.build(past.s)
			if err := past.s.check(); err != nil {
				t.Fatal(err)
			}
			if err := past.s.apply(c.under); err != nil {
				t.Fatal(err)
			}
			c.past(past.s)
			if err := New().Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, past)))); !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("restore of a state past the limit: %v, want ErrLimit naming %s", err, c.name)
			}
		})
	}
}
