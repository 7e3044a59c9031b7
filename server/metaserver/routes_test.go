package metaserver

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/transport"
)

// TestPickGroupsByLoad: groups that reported come before those only
// presumed alive, then fewest subjects, then fewest message bytes; drained,
// unavailable and excluded groups are never picked.
func TestPickGroupsByLoad(t *testing.T) {
	m, _, clk := newLeader(t)
	register(t, m, "busy", "light", "heavy", "drained", "silent", "quiet")
	if _, err := call(t, m, transport.TypeSetWritable, transport.SetWritableRequest{BrokerGroup: "drained", Writable: false}); err != nil {
		t.Fatal(err)
	}
	// busy holds a subject already; light and heavy differ by bytes.
	if _, err := call(t, m, transport.TypeAssign, transport.AssignRequest{Subject: "old", BrokerGroups: []string{"busy"}}); err != nil {
		t.Fatal(err)
	}
	// Within the new leader's first timeout every group is presumed alive.
	if got := m.pickGroups(6, nil); len(got) != 5 || slices.Contains(got, "drained") {
		t.Fatalf("picked %v before any heartbeat, want the five writable groups", got)
	}
	for g, bytes := range map[string]int64{"busy": 0, "light": 10, "heavy": 1 << 30, "drained": 0, "silent": 0} {
		beat(t, m, g, 1, bytes)
	}
	// Reported groups first, however loaded; quiet, never heard from, last.
	if got, want := m.pickGroups(6, nil), []string{"silent", "light", "heavy", "busy", "quiet"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v, want %v", got, want)
	}
	if got, want := m.pickGroups(2, []string{"silent"}), []string{"light", "heavy"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v excluding silent, want %v", got, want)
	}
	// Past the first timeout, a group that never reported is unavailable;
	// so is one whose leader fell silent.
	clk.advance(9 * time.Second)
	for g, bytes := range map[string]int64{"busy": 0, "light": 10, "heavy": 1 << 30} {
		beat(t, m, g, 1, bytes)
	}
	clk.advance(2 * time.Second)
	if got, want := m.pickGroups(6, nil), []string{"light", "heavy", "busy"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v after silent and quiet timed out, want %v", got, want)
	}
}

// TestFirstRouteAssignsOnce: a producer's first route request for a new
// subject assigns it to SubjectGroups groups by load, in one proposal, and
// answers the route with each group's servers and health; asking again,
// or looking it up, proposes nothing, and a lookup of an unknown subject
// assigns nothing.
func TestFirstRouteAssignsOnce(t *testing.T) {
	m, g, _ := newLeader(t)
	register(t, m, "g1", "g2", "g3")
	beat(t, m, "g1", 1, 5<<20)
	beat(t, m, "g2", 1, 0)
	beat(t, m, "g3", 1, 1<<20)

	before := g.proposals()
	r, err := route(t, m, transport.RouteRequest{Subject: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if got := groupNames(r); !slices.Equal(got, []string{"g2", "g3"}) {
		t.Fatalf("orders routed to %v, want the two least loaded, g2 and g3", got)
	}
	for _, gr := range r.BrokerGroups {
		if !gr.Writable || !gr.Available || gr.Leader != "127.0.0.1:6001" || !slices.Equal(gr.Servers, []string{"127.0.0.1:6001"}) {
			t.Fatalf("group %+v of the route: want writable, available, its leader and servers named", gr)
		}
	}
	if n := g.proposals() - before; n != 1 {
		t.Fatalf("a first use proposed %d commands, want 1", n)
	}
	if a, ok := g.last().(*meta.Assign); !ok || !a.IfNew || a.Subject != "orders" {
		t.Fatalf("proposed %#v, want an Assign of orders made only if new", g.last())
	}

	before = g.proposals()
	again, err := route(t, m, transport.RouteRequest{Subject: "orders"})
	if err != nil || !slices.Equal(groupNames(again), groupNames(r)) {
		t.Fatalf("the second request: %v %v, want the same route", groupNames(again), err)
	}
	if _, err := route(t, m, transport.RouteRequest{Subject: "orders", Lookup: true}); err != nil {
		t.Fatal(err)
	}
	_, err = route(t, m, transport.RouteRequest{Subject: "never-used", Lookup: true})
	if transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("a lookup of an unused subject: %v, want INVALID", err)
	}
	if n := g.proposals() - before; n != 0 {
		t.Fatalf("requests for an assigned subject and a lookup proposed %d commands, want none", n)
	}
	if _, ok := m.fsm.Route("never-used"); ok {
		t.Fatal("a lookup created a route")
	}
}

// TestRacingFirstUsesAgree: many clients using a new subject at once get
// one route, assigned by one proposal.
func TestRacingFirstUsesAgree(t *testing.T) {
	m, g, _ := newLeader(t)
	register(t, m, "g1", "g2", "g3", "g4")
	before := g.proposals()
	const n = 16
	routes := make([][]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := route(t, m, transport.RouteRequest{Subject: "new"})
			routes[i], errs[i] = groupNames(r), err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || len(routes[i]) != 2 || !slices.Equal(routes[i], routes[0]) {
			t.Fatalf("request %d: %v %v; the first got %v", i, routes[i], errs[i], routes[0])
		}
	}
	if got := g.proposals() - before; got != 1 {
		t.Fatalf("%d racing first uses proposed %d commands, want 1", n, got)
	}
}

// TestNoGroupToAssign: a new subject with no writable, available group is
// UNAVAILABLE and proposes nothing.
func TestNoGroupToAssign(t *testing.T) {
	m, g, clk := newLeader(t)
	register(t, m, "g1")
	clk.advance(11 * time.Second) // g1 never reported: unavailable
	before := g.proposals()
	if _, err := route(t, m, transport.RouteRequest{Subject: "s"}); transport.CodeOf(err) != transport.Unavailable {
		t.Fatalf("a first use with no group available: %v, want UNAVAILABLE", err)
	}
	if g.proposals() != before {
		t.Fatal("a first use with no group available proposed a command")
	}
}

// TestOnlyAReadyLeaderServes: a follower answers NOT_LEADER, a leader that
// has not caught up in its term UNAVAILABLE; a send is INVALID on either.
func TestOnlyAReadyLeaderServes(t *testing.T) {
	m, g, _ := newLeader(t)
	register(t, m, "g1")

	g.mu.Lock()
	g.term = 2 // leadership regained in a later term, without a barrier yet
	g.mu.Unlock()
	if m.Ready() {
		t.Fatal("ready in a term it has not caught up in")
	}
	if _, err := route(t, m, transport.RouteRequest{Subject: "s"}); transport.CodeOf(err) != transport.Unavailable {
		t.Fatalf("a route from a leader catching up: %v, want UNAVAILABLE", err)
	}
	// A barrier that fails leaves it unready, until its term ends.
	g.mu.Lock()
	g.barrier = transport.Errorf(transport.Timeout, "barrier")
	g.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if m.Lead(ctx) || m.Ready() {
		t.Fatal("ready without a barrier")
	}
	g.mu.Lock()
	g.barrier = nil
	g.mu.Unlock()
	if !m.Lead(context.Background()) || !m.Ready() {
		t.Fatal("not ready after a barrier in its term")
	}
	if _, err := route(t, m, transport.RouteRequest{Subject: "s"}); err != nil {
		t.Fatalf("a route from the ready leader: %v", err)
	}

	g.mu.Lock()
	g.leader = false
	g.mu.Unlock()
	if _, err := route(t, m, transport.RouteRequest{Subject: "s"}); transport.CodeOf(err) != transport.NotLeader {
		t.Fatalf("a route from a follower: %v, want NOT_LEADER", err)
	}
	if _, err := m.Handle(context.Background(), transport.TypeSend, nil); transport.CodeOf(err) != transport.Invalid ||
		!strings.Contains(err.Error(), "ask it for the subject's route") {
		t.Fatalf("a send to a follower metaserver: %v, want INVALID", err)
	}
}

// TestHeartbeatOfAnUnknownNode: a node the metaserver does not know is
// told to register, and its report makes no group look alive.
func TestHeartbeatOfAnUnknownNode(t *testing.T) {
	m, _, clk := newLeader(t)
	register(t, m, "g1")
	clk.advance(11 * time.Second)
	if reply := beat(t, m, "g2", 1, 0); !reply.Unknown {
		t.Fatalf("the reply to an unknown node: %+v, want Unknown", reply)
	}
	if m.health.group("g2").available {
		t.Fatal("an unknown node's heartbeat made its group available")
	}
	if reply := beat(t, m, "g1", 1, 0); reply.Unknown || !reply.Writable || reply.Apps == nil {
		t.Fatalf("the reply to a registered node without the applications: %+v", reply)
	}
	c := m.Cluster()
	if len(c.BrokerGroups) != 1 || !c.BrokerGroups[0].Available || c.BrokerGroups[0].Leader != "g1-n1" || c.Meta.ID != "m1" {
		t.Fatalf("cluster view %+v, want g1 led by g1-n1", c)
	}
}

// TestAppLimitCounted: a new subject past its application's limit is
// INVALID, costs no proposal, and is counted by limit.
func TestAppLimitCounted(t *testing.T) {
	m, g, _ := newLeader(t)
	register(t, m, "g1")
	if _, err := call(t, m, transport.TypeAppPut, transport.AppRequest{Code: "small", Send: []string{"*"}, MaxSubjects: 1, Create: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := route(t, m, transport.RouteRequest{Subject: "a", App: "small"}); err != nil {
		t.Fatal(err)
	}
	before := g.proposals()
	_, err := route(t, m, transport.RouteRequest{Subject: "b", App: "small"})
	if transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("a subject past the application's limit: %v, want INVALID", err)
	}
	if g.proposals() != before {
		t.Fatal("a refusal at the application's limit proposed a command")
	}
	if got := testutil.ToFloat64(m.appLimitHits.WithLabelValues("subjects")); got != 1 {
		t.Fatalf("refusals counted at the subjects limit: %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues(transport.TypeRoute.String())); got != 2 {
		t.Fatalf("route requests counted: %v, want 2", got)
	}
}
