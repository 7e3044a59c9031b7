package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// MetaNode is one member of the metaserver group: a Raft node over the
// meta state machine (broker groups, routes), the broker heartbeats it
// receives while it leads, a client listener and an admin HTTP listener.
type MetaNode struct {
	raftGroup
	host
	cfg MetaConfig
	log hclog.Logger

	fsm       *meta.FSM
	health    *health
	readyTerm atomic.Uint64 // the term in which this node led and caught up (a barrier); 0 if none
	assignMu  sync.Mutex    // one route assignment at a time, so racing first uses agree
	// consumerMu: one consumer group recorded at a time, so that racing
	// requests cannot each pass an application's limit.
	consumerMu sync.Mutex

	guard    *guard
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	// appLimitHits counts requests refused at an application's own limit.
	appLimitHits *prometheus.CounterVec
}

// NewMeta opens a metaserver node's storage, starts Raft and its listeners.
func NewMeta(cfg MetaConfig) (_ *MetaNode, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &MetaNode{cfg: cfg, log: cfg.Logger.With("node", cfg.ID, "raft_group", meta.GroupName), fsm: meta.New()}
	m.health = newHealth(cfg.GroupTimeout, cfg.Now)
	m.host = newHost(m.log)
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	if err := m.listen(cfg.DataDir, cfg.ClientAddr, cfg.AdvertiseAddr, cfg.TLS); err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, m.log.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("server: snapshot store: %w", err)
	}
	m.raftGroup = raftGroup{
		id: cfg.ID, group: meta.GroupName, log: m.log, applyTimeout: cfg.ApplyTimeout, dial: m.dialer(cfg.SourceIP),
		sec:        cfg.security(),
		memberAddr: m.fsm.MemberAddr,
		setMember: func(id, addr string) []byte {
			return meta.Encode(&meta.Member{ID: id, ClientAddr: addr})
		},
	}
	// The metaserver's log is small and seldom written: raft-boltdb (see
	// DESIGN.md, "The Raft log store").
	if err := m.open(raftSetup{dir: cfg.DataDir, addr: cfg.RaftAddr, advertise: cfg.RaftAdvertiseAddr, bootstrap: cfg.Bootstrap,
		timing: cfg.RaftTiming, fsm: m.fsm, snaps: snaps, raftLog: raftlog.Bolt, logCache: raftlog.DefaultCache,
		tls: m.tls.reloader()}); err != nil {
		return nil, err
	}
	m.newMetrics()
	m.guard = newGuard(cfg.Auth, m.fsm.Apps, newAuditLog(m.log), m.registry)
	if err := m.serve(m.handle, m.guard, cfg.ClientLimits, cfg.HTTPAddr, cfg.OpenHTTP, func() any { return m.Status() }, m.registry); err != nil {
		return nil, err
	}
	m.goLoop(func() {
		m.watchLeadership(m.ctx, func() {}, func(ctx context.Context) {
			m.goLoop(func() { m.lead(ctx) })
		})
	})
	cfg.warnInsecure(m.log)
	m.log.Info("started", "client", m.clientAddr, "raft", cfg.RaftAddr, "http", cfg.HTTPAddr, "raft-log", m.store.Kind())
	return m, nil
}

// lead readies a new leader: it serves requests only once it has applied
// every entry of earlier terms (a barrier), or it could assign a subject a
// second time, or call a drained group writable, from stale state.
func (m *MetaNode) lead(ctx context.Context) {
	for {
		term := m.raft.CurrentTerm()
		if m.barrier(ctx) == nil && m.raft.CurrentTerm() == term {
			// Heartbeats went to the old leader: start afresh, giving every
			// group one timeout to report before calling it unavailable.
			m.health.reset()
			m.readyTerm.Store(term)
			break
		}
		if !wait.Sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
	m.announce(ctx, m.clientAddr)
}

// ready reports whether this node leads and has caught up in the current
// term: leadership regained in a later term needs a barrier of its own.
func (m *MetaNode) ready() bool {
	return m.isLeader() && m.readyTerm.Load() == m.raft.CurrentTerm()
}

func (m *MetaNode) newMetrics() {
	m.registry = prometheus.NewRegistry()
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_requests_total", Help: "Requests received by the metaserver, by type.",
	}, []string{"type"})
	m.appLimitHits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qmq_meta_app_limit_refusals_total",
		Help: "Route requests refused because the application would pass its own limit of subjects or consumer groups.",
	}, []string{"limit"})
	m.registry.MustRegister(m.requests, m.appLimitHits, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_raft_applied_index", Help: "Last Raft index applied."},
			func() float64 { return float64(m.fsm.Applied()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_raft_leader", Help: "1 if this node leads the metaserver group."},
			func() float64 {
				if m.isLeader() {
					return 1
				}
				return 0
			}),
	)
}

// Raft exposes the Raft node, for tests and admin tools.
func (m *MetaNode) Raft() *raft.Raft { return m.raft }

// Status reports the node's Raft position and the metaserver group.
func (m *MetaNode) Status() Status { return m.status(m.fsm.Applied(), m.clientAddr) }

// handle answers one request.
func (m *MetaNode) handle(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	m.requests.WithLabelValues(t.String()).Inc()
	switch t {
	case transport.TypeStatus:
		return json.Marshal(m.Status())
	case transport.TypeJoin:
		if err := m.checkJoin(p); err != nil {
			return nil, err
		}
		return m.handleJoin(ctx, p)
	case transport.TypeLeave:
		return m.handleLeave(ctx, p)
	case transport.TypeTransfer:
		return m.handleTransfer(p)
	case transport.TypeSend, transport.TypePull, transport.TypeAck, transport.TypeHeartbeat:
		return nil, transport.Errorf(transport.Invalid, "%s to a metaserver: ask it for the subject's route, then use a broker group", t)
	}
	if !m.isLeader() {
		return nil, m.notLeader()
	}
	if !m.ready() {
		return nil, transport.Errorf(transport.Unavailable, "metaserver node %s has just become leader and is catching up", m.cfg.ID)
	}
	ctx, cancel := m.requestContext(ctx)
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
		return json.Marshal(m.cluster())
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
// configuration. Everything else is handleJoin's to check.
func (m *MetaNode) checkJoin(p []byte) error {
	var req transport.JoinRequest
	if !m.isLeader() || transport.DecodeJSON(p, &req) != nil || meta.Check(&meta.Member{ID: req.ID}) != nil {
		return nil
	}
	if err := m.fsm.Check(&meta.Member{ID: req.ID, ClientAddr: req.ClientAddr}); errors.Is(err, meta.ErrLimit) {
		return transport.Errorf(transport.Invalid, "refusing to add node %s: %v", req.ID, err)
	}
	return nil
}

// Close stops the node. Idempotent.
func (m *MetaNode) Close() error {
	m.closeMu.Lock()
	defer m.closeMu.Unlock()
	if !m.beginClose() {
		return nil
	}
	errs := []error{m.shutdown()}
	m.wg.Wait()
	errs = append(errs, m.closeStores()...)
	m.log.Info("stopped")
	return errors.Join(errs...)
}
