package server

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// startMeta starts a metaserver node with fast timings, changed by tweak;
// it stops at cleanup.
func startMeta(t testing.TB, id string, bootstrap bool, tweak ...func(*MetaConfig)) *MetaNode {
	t.Helper()
	cfg := DefaultMetaConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = id, t.TempDir(), bootstrap
	cfg.ClientAddr, cfg.RaftAddr = freeAddr(t), freeAddr(t)
	cfg.SetElectionTimeout(300 * time.Millisecond)
	cfg.GroupTimeout = 600 * time.Millisecond
	cfg.Logger = testLogger(t, id)
	for _, f := range tweak {
		f(&cfg)
	}
	m, err := NewMeta(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// startMetaBroker starts a one-node broker group reporting to metas.
func startMetaBroker(t testing.TB, group string, metas ...*MetaNode) *Node {
	t.Helper()
	var addrs []string
	for _, m := range metas {
		addrs = append(addrs, m.ClientAddr())
	}
	return startNode(t, group+"-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat = group, addrs, 100*time.Millisecond
		c.ClientAddr = freeAddr(t) // fixed, so a restart keeps it
	})
}

func newAdmin(t *testing.T, addr string, opts ...qmq.ConnOption) *admin.Client {
	t.Helper()
	a, err := admin.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// groupAvailable reports what the metaserver says of a group's health.
func groupAvailable(t *testing.T, a *admin.Client, name string) (available, known bool) {
	c, err := a.Cluster(ctxFor(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range c.BrokerGroups {
		if g.Name == name {
			return g.Available && g.Leader != "", true
		}
	}
	return false, false
}

// useSubject asks for a subject's route as a producer does, assigning it on
// first use.
func useSubject(t *testing.T, addr, subject string) (*admin.Route, error) {
	t.Helper()
	c := clientOf(t, addr)
	b, _ := json.Marshal(transport.RouteRequest{Subject: subject})
	body, err := c.Call(ctxFor(t, 10*time.Second), transport.TypeRoute, b)
	if err != nil {
		return nil, err
	}
	var r admin.Route
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return &r, nil
}

// labeledCounter returns the series of the counter name in reg whose
// label is value, 0 if it has none yet.
func labeledCounter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func routeGroups(r *admin.Route) []string {
	var out []string
	for _, g := range r.BrokerGroups {
		out = append(out, g.Name)
	}
	return out
}

func TestMetaRoutesByLoadAndHealth(t *testing.T) {
	m := startMeta(t, "m1", true)
	brokers := map[string]*Node{}
	for _, g := range []string{"g1", "g2", "g3"} {
		brokers[g] = startMetaBroker(t, g, m)
	}
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "three available groups", func() bool {
		for g := range brokers {
			if ok, _ := groupAvailable(t, a, g); !ok {
				return false
			}
		}
		return true
	})

	// Six subjects × two groups each, least loaded first: four per group.
	counts := map[string]int{}
	for _, s := range []string{"s0", "s1", "s2", "s3", "s4", "s5"} {
		r, err := useSubject(t, m.ClientAddr(), s)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.BrokerGroups) != 2 {
			t.Fatalf("%s routed to %v, want 2 groups", s, routeGroups(r))
		}
		for _, g := range r.BrokerGroups {
			counts[g.Name]++
		}
	}
	if counts["g1"] != 4 || counts["g2"] != 4 || counts["g3"] != 4 {
		t.Fatalf("assignments per group %v, want 4 each", counts)
	}
	// Looking a subject up (qmqctl subject show) assigns nothing.
	if _, err := a.Route(ctxFor(t, 5*time.Second), "never-used"); transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("lookup of an unused subject: %v, want INVALID", err)
	}
	if _, ok := m.fsm.Route("never-used"); ok {
		t.Fatal("a lookup created a route")
	}

	// A drained group takes no new subjects, and its leader refuses sends.
	if err := a.SetWritable(ctxFor(t, 5*time.Second), "g3", false); err != nil {
		t.Fatal(err)
	}
	r, err := useSubject(t, m.ClientAddr(), "after-drain")
	if err != nil || slices.Contains(routeGroups(r), "g3") {
		t.Fatalf("route %v (%v): includes the readonly g3", r, err)
	}
	waitFor(t, 5*time.Second, "g3's leader to learn it is readonly", func() bool { return !brokers["g3"].writable.Load() })
	conn, err := transport.Dial(ctxFor(t, 5*time.Second), brokers["g3"].ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &transport.SendRequest{Messages: []*message.Message{{ID: "x", Subject: "s0"}}}
	if _, err := conn.Call(ctxFor(t, 5*time.Second), transport.TypeSend, req.Encode()); transport.CodeOf(err) != transport.ReadOnly {
		t.Fatalf("send to a drained group: %v, want READONLY", err)
	}

	// A group whose leader stops heartbeating is unavailable and gets no new
	// subjects; it comes back by itself.
	g2 := brokers["g2"]
	cfg := g2.cfg
	g2.Close()
	waitFor(t, 5*time.Second, "g2 to be marked unavailable", func() bool {
		ok, known := groupAvailable(t, a, "g2")
		return known && !ok
	})
	r, err = useSubject(t, m.ClientAddr(), "while-g2-down")
	if err != nil || !slices.Equal(routeGroups(r), []string{"g1"}) {
		t.Fatalf("route %v (%v), want only g1 (g2 down, g3 readonly)", r, err)
	}
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { restarted.Close() })
	waitFor(t, 10*time.Second, "g2 to come back", func() bool { ok, _ := groupAvailable(t, a, "g2"); return ok })
}

// TestBrokerRegistersAgain: a node the metaserver forgot while it is still
// a member of its group registers again from its next heartbeat.
func TestBrokerRegistersAgain(t *testing.T) {
	m := startMeta(t, "m1", true)
	b := startMetaBroker(t, "g1", m)
	waitFor(t, 10*time.Second, "g1 to register", func() bool { _, ok := m.fsm.BrokerGroup("g1"); return ok })
	c := clientOf(t, m.ClientAddr())
	req, _ := json.Marshal(transport.DeregisterRequest{BrokerGroup: "g1", ID: b.cfg.ID})
	if _, err := c.Call(ctxFor(t, 5*time.Second), transport.TypeDeregister, req); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.fsm.BrokerGroup("g1"); ok {
		t.Fatal("g1 still registered after its only node was deregistered")
	}
	waitFor(t, 10*time.Second, "the node to register again", func() bool {
		g, ok := m.fsm.BrokerGroup("g1")
		return ok && g.Nodes[b.cfg.ID].ClientAddr == b.ClientAddr()
	})
}

func TestMetaGroupSurvivesLeaderLoss(t *testing.T) {
	m1 := startMeta(t, "m1", true)
	waitFor(t, 10*time.Second, "m1 to lead", func() bool { return m1.isLeader() && m1.fsm.MemberAddr("m1") != "" })
	metas := []*MetaNode{m1}
	a := newAdmin(t, m1.ClientAddr())
	for _, id := range []string{"m2", "m3"} {
		m := startMeta(t, id, false)
		if err := a.Join(ctxFor(t, 10*time.Second), admin.MetaGroup, id, m.cfg.RaftAddr, m.ClientAddr()); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		metas = append(metas, m)
	}
	b := startMetaBroker(t, "g1", metas...)
	// Through the broker, which forwards to the metaserver.
	ab := newAdmin(t, b.ClientAddr())
	before, err := useSubject(t, b.ClientAddr(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every metaserver node to apply the route", func() bool {
		for _, m := range metas {
			if _, ok := m.fsm.Route("orders"); !ok {
				return false
			}
		}
		return true
	})
	m1.Close()
	after, err := ab.Route(ctxFor(t, 20*time.Second), "orders") // a lookup: it must not assign again
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(routeGroups(before), routeGroups(after)) {
		t.Fatalf("route changed across the metaserver failover: %v → %v", routeGroups(before), routeGroups(after))
	}
	// The new leader learns the group's health from heartbeats.
	waitFor(t, 10*time.Second, "g1 to report to the new leader", func() bool {
		c, err := ab.Cluster(ctxFor(t, 5*time.Second))
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader == "g1-n1" && c.Meta.ID != "m1"
	})
}

// TestJoinRefusesNodesThatAreNotWhatTheyClaim: a voter that cannot be
// reached costs a group its quorum, so join checks the node first.
func TestJoinRefusesNodesThatAreNotWhatTheyClaim(t *testing.T) {
	m := startMeta(t, "m1", true)
	b := startMetaBroker(t, "g1", m)
	waitLeader(t, b)
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "g1 to register", func() bool { _, ok := m.fsm.BrokerGroup("g1"); return ok })
	spare := startMeta(t, "m2", false)
	for name, req := range map[string][3]string{ // group, id, raft address; the client address is spare's
		"unreachable":     {"g1", "n9", freeAddr(t)},
		"wrong id":        {admin.MetaGroup, "m9", spare.cfg.RaftAddr},
		"wrong raft":      {admin.MetaGroup, "m2", freeAddr(t)},
		"another group's": {"g1", "m2", spare.cfg.RaftAddr},
	} {
		client := spare.ClientAddr()
		if name == "unreachable" {
			client = freeAddr(t)
		}
		err := a.Join(ctxFor(t, 10*time.Second), req[0], req[1], req[2], client)
		if transport.CodeOf(err) != transport.Invalid {
			t.Errorf("%s: join answered %v, want INVALID", name, err)
		}
	}
	if n := len(m.Status().Members); n != 1 || !m.isLeader() {
		t.Fatalf("metaserver group has %d members (leader %v) after refused joins", n, m.isLeader())
	}
	if n := len(b.Status().Members); n != 1 || !b.isLeader() {
		t.Fatalf("broker group has %d members (leader %v) after refused joins", n, b.isLeader())
	}
	// The real thing joins.
	if err := a.Join(ctxFor(t, 10*time.Second), admin.MetaGroup, "m2", spare.cfg.RaftAddr, spare.ClientAddr()); err != nil {
		t.Fatal(err)
	}
}

// A node of a drained group refuses sends from its restart, before any
// heartbeat reply says the group is drained: it keeps what the metaserver
// last said. (It took sends until its first reply; here the metaserver is
// down, and it took them all along.)
func TestRestartedNodeOfADrainedGroupRefusesSends(t *testing.T) {
	m := startMeta(t, "m1", true)
	n := startMetaBroker(t, "g1", m)
	waitLeader(t, n)
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "g1 registered", func() bool { _, ok := m.fsm.BrokerGroup("g1"); return ok })
	if err := a.SetWritable(ctxFor(t, 10*time.Second), "g1", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the node to hear it is drained", func() bool { return !n.writable.Load() })
	cfg := n.cfg
	n.Close()
	m.Close() // no heartbeat reply from now on
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	waitLeader(t, r)
	waitSettled(t, r) // before, a refusal answers UNAVAILABLE: the leader cannot look yet
	ctx := ctxFor(t, 10*time.Second)
	conn, err := transport.Dial(ctx, r.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req := &transport.SendRequest{Messages: []*message.Message{{ID: "after-restart", Subject: "s", CreatedAt: 1, Body: []byte("x")}}}
	if _, err := conn.Call(ctx, transport.TypeSend, req.Encode()); transport.CodeOf(err) != transport.ReadOnly {
		t.Fatalf("a send to the restarted node of a drained group: %v, want READONLY", err)
	}
}

// A node joins as a nonvoter, promoted once its log holds the group's
// commit: one whose Raft port the group cannot reach stays a nonvoter,
// the join fails saying so, and a group of one keeps its leader. Added
// as a voter at once it cost the group its quorum; and a new node refuses
// votes until it has caught up, so a group of two whose leader stepped
// down before its newcomer caught up had no leader ever after.
func TestJoinPromotesOnlyACaughtUpNode(t *testing.T) {
	m1 := startMeta(t, "m1", true, func(c *MetaConfig) { c.ApplyTimeout = 2 * time.Second }) // a join's wait, too
	waitFor(t, 10*time.Second, "m1 to lead", func() bool { return m1.isLeader() && m1.fsm.MemberAddr("m1") != "" })
	a := newAdmin(t, m1.ClientAddr())
	// m2's Raft address, as the group is told, accepts connections and
	// never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	m2 := startMeta(t, "m2", false, func(c *MetaConfig) { c.RaftAdvertiseAddr = silent.Addr().String() })
	err = a.Join(ctxFor(t, 5*time.Second), admin.MetaGroup, "m2", silent.Addr().String(), m2.ClientAddr())
	if err == nil || !strings.Contains(err.Error(), "nonvoter") {
		t.Fatalf("joining a node its group cannot reach: %v, want an error saying it stays a nonvoter", err)
	}
	if !m1.isLeader() {
		t.Fatal("m1 lost its leadership to a join of a node that could not catch up")
	}
	for _, s := range m1.raft.GetConfiguration().Configuration().Servers {
		if s.ID == "m2" && s.Suffrage != raft.Nonvoter {
			t.Fatalf("m2 is a %v, not a nonvoter", s.Suffrage)
		}
	}
}
