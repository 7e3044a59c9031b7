package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/transport"
)

// clock is a test's clock, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fakeGroup is a Raft group of one that applies each proposal to the state
// machine at once, as a leader's commit would, and records it.
type fakeGroup struct {
	fsm *meta.FSM

	mu       sync.Mutex
	leader   bool
	term     uint64
	barrier  error
	index    uint64
	proposed []meta.Command
}

var errNotLeader = &transport.Error{Code: transport.NotLeader, Message: "not the leader"}

func (g *fakeGroup) Propose(ctx context.Context, cmd meta.Command) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.leader {
		return errNotLeader
	}
	g.index++
	if res := g.fsm.Apply(&raft.Log{Index: g.index, Type: raft.LogCommand, Data: meta.Encode(cmd)}); res != nil {
		return transport.Errorf(transport.Invalid, "%v", res)
	}
	g.proposed = append(g.proposed, cmd)
	return nil
}

func (g *fakeGroup) Leader() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leader
}

func (g *fakeGroup) NotLeader() error { return errNotLeader }

func (g *fakeGroup) Barrier(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.barrier
}

func (g *fakeGroup) Term() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.term
}

func (g *fakeGroup) Status() transport.Status {
	return transport.Status{ID: "m1", Group: meta.GroupName, State: "Leader", Term: g.Term()}
}

func (g *fakeGroup) Membership(context.Context, transport.Type, []byte) ([]byte, error) {
	return nil, errors.New("no membership in a fake group")
}

// proposals returns how many commands were proposed so far.
func (g *fakeGroup) proposals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.proposed)
}

func (g *fakeGroup) last() meta.Command {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.proposed[len(g.proposed)-1]
}

// newLeader returns a metaserver that leads its fake group and is ready,
// with a clock of its own.
func newLeader(t *testing.T) (*Server, *fakeGroup, *clock) {
	t.Helper()
	clk := newClock()
	g := &fakeGroup{fsm: meta.New(), leader: true, term: 1}
	m := New(Config{ID: "m1", SubjectGroups: 2, GroupTimeout: 10 * time.Second, ApplyTimeout: 5 * time.Second,
		Now: clk.now, Logger: hclog.NewNullLogger()}, g.fsm, g)
	if !m.Lead(context.Background()) || !m.Ready() {
		t.Fatal("a leader whose barrier succeeds is not ready")
	}
	return m, g, clk
}

// call sends one request to m's handler, req encoded as JSON.
func call(t *testing.T, m *Server, typ transport.Type, req any) ([]byte, error) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return m.Handle(context.Background(), typ, b)
}

// register registers one node of each broker group named.
func register(t *testing.T, m *Server, groups ...string) {
	t.Helper()
	for _, g := range groups {
		if _, err := call(t, m, transport.TypeRegister, transport.RegisterRequest{BrokerGroup: g, ID: g + "-n1",
			RaftAddr: "127.0.0.1:7001", ClientAddr: "127.0.0.1:6001"}); err != nil {
			t.Fatalf("register %s: %v", g, err)
		}
	}
}

// beat reports a broker group's node as its leader, in term, holding
// bytes of messages.
func beat(t *testing.T, m *Server, group string, term uint64, bytes int64) transport.HeartbeatReply {
	t.Helper()
	body, err := call(t, m, transport.TypeBrokerHeartbeat, transport.BrokerHeartbeat{
		Status: transport.Status{ID: group + "-n1", Group: group, State: "Leader", Term: term, ClientAddr: "127.0.0.1:6001"},
		Load:   transport.Load{MessageBytes: bytes}})
	if err != nil {
		t.Fatalf("heartbeat of %s: %v", group, err)
	}
	var reply transport.HeartbeatReply
	if err := json.Unmarshal(body, &reply); err != nil {
		t.Fatal(err)
	}
	return reply
}

// route asks for subject's route as a producer's first send does.
func route(t *testing.T, m *Server, req transport.RouteRequest) (transport.Route, error) {
	t.Helper()
	body, err := call(t, m, transport.TypeRoute, req)
	if err != nil {
		return transport.Route{}, err
	}
	var r transport.Route
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

func groupNames(r transport.Route) []string {
	var out []string
	for _, g := range r.BrokerGroups {
		out = append(out, g.Name)
	}
	return out
}
