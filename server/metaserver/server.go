package metaserver

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// Group is what the metaserver needs of the Raft group it runs on: the
// node that hosts it (server.MetaNode) gives it one, over the state
// machine handed to New.
type Group interface {
	// Propose proposes a command and waits until it is committed and
	// applied to the state machine. Its errors are wire errors: a refusal
	// of apply is INVALID, lost leadership NOT_LEADER, a wait past ctx
	// TIMEOUT.
	Propose(ctx context.Context, cmd meta.Command) error
	// Leader reports whether this node leads the group now.
	Leader() bool
	// NotLeader is the NOT_LEADER error naming the leader's client address.
	NotLeader() error
	// Barrier waits until every entry committed before it is applied.
	Barrier(ctx context.Context) error
	// Term is the node's current Raft term.
	Term() uint64
	// Status is the node's status: the answer to a status request, and
	// the metaserver's own part of the cluster view.
	Status() transport.Status
	// Membership answers the requests that change the group itself
	// (transport.TypeJoin, TypeLeave, TypeTransfer), as every Raft group
	// of the cluster does.
	Membership(ctx context.Context, t transport.Type, p []byte) ([]byte, error)
}

// Config configures a metaserver. The node checks it (server.MetaConfig).
type Config struct {
	// ID is the node's id, named in refusals.
	ID string
	// SubjectGroups is how many broker groups a subject is assigned to on
	// its first use (fewer if fewer are available).
	SubjectGroups int
	// GroupTimeout is how long a broker group's leader may go without a
	// heartbeat before the group is marked unavailable.
	GroupTimeout time.Duration
	// ApplyTimeout bounds one request's proposals.
	ApplyTimeout time.Duration
	// Auth says whether the metaserver checks applications; heartbeat
	// replies tell the brokers.
	Auth bool
	// Now is the clock heartbeats and secrets' grace are timed by.
	Now func() time.Time
	// Logger is the node's logger.
	Logger hclog.Logger
}

// Server is the metaserver's logic on one member of its group: it answers
// requests (on the leader, once caught up), keeps the broker heartbeats,
// and counts what it does.
type Server struct {
	cfg   Config
	log   hclog.Logger
	fsm   *meta.FSM
	group Group

	health    *health
	readyTerm atomic.Uint64 // the term in which this node led and caught up (a barrier); 0 if none
	assignMu  sync.Mutex    // one route assignment at a time, so racing first uses agree
	// consumerMu: one consumer group recorded at a time, so that racing
	// requests cannot each pass an application's limit.
	consumerMu sync.Mutex

	requests *prometheus.CounterVec
	// appLimitHits counts requests refused at an application's own limit.
	appLimitHits *prometheus.CounterVec
}

// New returns the metaserver over fsm, the state machine g replicates.
func New(cfg Config, fsm *meta.FSM, g Group) *Server {
	return &Server{cfg: cfg, log: cfg.Logger, fsm: fsm, group: g,
		health: newHealth(cfg.GroupTimeout, cfg.Now),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_meta_requests_total", Help: "Requests received by the metaserver, by type.",
		}, []string{"type"}),
		appLimitHits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_meta_app_limit_refusals_total",
			Help: "Route requests refused because the application would pass its own limit of subjects or consumer groups.",
		}, []string{"limit"}),
	}
}

// Collectors are the metaserver's metrics, for the node's registry:
// requests by type, refusals at applications' limits, the applied index
// and whether this node leads.
func (m *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.appLimitHits, groupsCollector{m},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_raft_applied_index", Help: "Last Raft index applied."},
			func() float64 { return float64(m.fsm.Applied()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_raft_leader", Help: "1 if this node leads the metaserver group."},
			func() float64 {
				if m.group.Leader() {
					return 1
				}
				return 0
			}),
	}
}

// Lead readies a new leader, for the term ctx lasts: it serves requests
// only once it has applied every entry of earlier terms (a barrier), or it
// could assign a subject a second time, or call a drained group writable,
// from stale state. It reports whether the node got ready before ctx
// ended.
func (m *Server) Lead(ctx context.Context) bool {
	for {
		term := m.group.Term()
		if m.group.Barrier(ctx) == nil && m.group.Term() == term {
			// Heartbeats went to the old leader: start afresh, giving every
			// group one timeout to report before calling it unavailable.
			m.health.reset()
			m.readyTerm.Store(term)
			return true
		}
		if !wait.Sleep(ctx, 50*time.Millisecond) {
			return false
		}
	}
}

// Ready reports whether this node leads and has caught up in the current
// term: leadership regained in a later term needs a barrier of its own.
func (m *Server) Ready() bool {
	return m.group.Leader() && m.readyTerm.Load() == m.group.Term()
}

// Handle answers one request: a transport.Handler.
func (m *Server) Handle(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	m.requests.WithLabelValues(t.String()).Inc()
	switch t {
	case transport.TypeStatus:
		return json.Marshal(m.group.Status())
	case transport.TypeJoin:
		if err := m.checkJoin(p); err != nil {
			return nil, err
		}
		return m.group.Membership(ctx, t, p)
	case transport.TypeLeave, transport.TypeTransfer, transport.TypeSetVersion, transport.TypeBackup:
		return m.group.Membership(ctx, t, p)
	case transport.TypeSend, transport.TypePull, transport.TypeAck, transport.TypeHeartbeat:
		return nil, transport.Errorf(transport.Invalid, "%s to a metaserver: ask it for the subject's route, then use a broker group", t)
	}
	if !m.group.Leader() {
		return nil, m.group.NotLeader()
	}
	if !m.Ready() {
		return nil, transport.Errorf(transport.Unavailable, "metaserver node %s has just become leader and is catching up", m.cfg.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ApplyTimeout)
	defer cancel()
	switch t {
	case transport.TypeRoute:
		return m.handleRoute(ctx, p)
	case transport.TypeRegister:
		return m.handleRegister(ctx, p)
	case transport.TypeDeregister:
		return m.handleDeregister(ctx, p)
	case transport.TypeBrokerHeartbeat:
		return m.handleBrokerHeartbeat(p)
	case transport.TypeCluster:
		return json.Marshal(m.Cluster())
	case transport.TypeAssign:
		return m.handleAssign(ctx, p)
	case transport.TypeSetWritable:
		return m.handleSetWritable(ctx, p)
	case transport.TypeSubjects:
		return m.handleSubjects()
	case transport.TypeMetaForgetConsumerGroup:
		return m.handleForgetGroup(ctx, p)
	case transport.TypeApps:
		return m.handleApps()
	case transport.TypeAppPut:
		return m.handleAppPut(ctx, p)
	case transport.TypeAppRotate:
		return m.handleAppRotate(ctx, p)
	case transport.TypeAppDelete:
		return m.handleAppDelete(ctx, p)
	}
	return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(t))
}

// checkJoin refuses, on the leader, a join whose client address the state
// could not record (meta.MaxMembers), before the node is added to the Raft
// configuration. Everything else is the group's to check.
func (m *Server) checkJoin(p []byte) error {
	var req transport.JoinRequest
	if !m.group.Leader() || transport.DecodeJSON(p, &req) != nil || meta.Check(&meta.Member{ID: req.ID}) != nil {
		return nil
	}
	if err := m.fsm.Check(&meta.Member{ID: req.ID, ClientAddr: req.ClientAddr}); errors.Is(err, meta.ErrLimit) {
		return transport.Errorf(transport.Invalid, "refusing to add node %s: %v", req.ID, err)
	}
	return nil
}

// groupsCollector reports, on the leader (the node the brokers' heartbeats
// reach), each broker group's availability as the routes see it: one
// series a broker group and a metric, so their number is bounded by the
// broker groups registered.
type groupsCollector struct{ m *Server }

var (
	descGroupAvailable = prometheus.NewDesc("qmq_broker_group_available",
		"1 while the broker group reports a leader to the metaserver (on the metaserver's leader).", []string{"broker_group"}, nil)
	descGroupWritable = prometheus.NewDesc("qmq_broker_group_writable",
		"1 unless the broker group is drained (routes send new subjects elsewhere).", []string{"broker_group"}, nil)
	descGroupLag = prometheus.NewDesc("qmq_broker_group_max_lag",
		"Entries the broker group's most lagging node has yet to apply, as heartbeats report.", []string{"broker_group"}, nil)
)

func (c groupsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGroupAvailable
	ch <- descGroupWritable
	ch <- descGroupLag
}

func (c groupsCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.m.group.Leader() {
		return // only the leader hears the heartbeats
	}
	one := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, g := range c.m.Cluster().BrokerGroups {
		var lag uint64
		for _, n := range g.Nodes {
			lag = max(lag, n.Lag)
		}
		ch <- prometheus.MustNewConstMetric(descGroupAvailable, prometheus.GaugeValue, one(g.Available), g.Name)
		ch <- prometheus.MustNewConstMetric(descGroupWritable, prometheus.GaugeValue, one(g.Writable), g.Name)
		ch <- prometheus.MustNewConstMetric(descGroupLag, prometheus.GaugeValue, float64(lag), g.Name)
	}
}
