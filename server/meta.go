package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/server/metaserver"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// MetaNode is one member of the metaserver group: a Raft node over the
// meta state machine (broker groups, routes, applications), the
// metaserver's logic on it (package metaserver: requests, broker
// heartbeats, assignment by load), a client listener and an admin HTTP
// listener.
type MetaNode struct {
	raftGroup
	host
	cfg MetaConfig
	log hclog.Logger

	fsm *meta.FSM
	srv *metaserver.Server

	guard    *guard
	registry *prometheus.Registry
	selfStop
}

// NewMeta opens a metaserver node's storage, starts Raft and its listeners.
func NewMeta(cfg MetaConfig) (_ *MetaNode, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &MetaNode{cfg: cfg, log: cfg.Logger.With("node", cfg.ID, "raft_group", meta.GroupName), selfStop: newSelfStop()}
	m.fsm = meta.NewWith(meta.Config{MaxVersion: cfg.MaxVersion, OnFatal: m.applyFailed})
	m.srv = metaserver.New(metaserver.Config{ID: cfg.ID, SubjectGroups: cfg.SubjectGroups, GroupTimeout: cfg.GroupTimeout,
		ApplyTimeout: cfg.ApplyTimeout, Auth: cfg.Auth, Now: cfg.Now, Logger: m.log}, m.fsm, metaGroup{m})
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
	// The metaserver's log is small and seldom written: raft-boltdb (see
	// DESIGN.md, "The Raft log store").
	store, err := raftlog.Open(cfg.DataDir, raftlog.Bolt, m.log)
	if err != nil {
		return nil, err
	}
	m.raftGroup.store = store
	// The state is memory only: a start restores the last snapshot and
	// replays the whole log after it.
	if err := checkLogVersions(store, 0, m.fsm.CheckEntry); err != nil {
		return nil, err
	}
	m.raftGroup = raftGroup{
		id: cfg.ID, group: meta.GroupName, log: m.log, applyTimeout: cfg.ApplyTimeout, store: store, dial: m.dialer(cfg.SourceIP),
		sec:        cfg.security(),
		memberAddr: m.fsm.MemberAddr,
		setMember: func(id, addr string) []byte {
			return meta.Encode(&meta.Member{ID: id, ClientAddr: addr})
		},
		versions: &groupVersions{
			active:  m.fsm.ActiveVersion,
			command: func(v version.Number) []byte { return meta.Encode(&meta.SetVersion{Version: v}) },
		},
		build: m.fsm.Supports(),
	}
	if err := m.open(raftSetup{dir: cfg.DataDir, addr: cfg.RaftAddr, advertise: cfg.RaftAdvertiseAddr, bootstrap: cfg.Bootstrap,
		timing: cfg.RaftTiming, fsm: m.fsm, snaps: snaps, logCache: raftlog.DefaultCache,
		tls: m.tls.reloader(), backupKind: transport.BackupMeta, backups: cfg.Backups}); err != nil {
		return nil, err
	}
	m.registry = prometheus.NewRegistry()
	m.registry.MustRegister(m.srv.Collectors()...)
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.guard = newGuard(cfg.Auth, m.fsm.Apps, newAuditLog(m.log), m.registry)
	if err := m.serve(m.srv.Handle, m.guard, cfg.ClientLimits, cfg.HTTPAddr, cfg.OpenHTTP, func() any { return m.Status() }, m.ready, m.registry); err != nil {
		return nil, err
	}
	m.goLoop(func() {
		m.watchLeadership(m.ctx, func() {}, func(ctx context.Context) {
			m.goLoop(func() {
				if m.srv.Lead(ctx) {
					// A group this node just formed starts at this
					// build's newest version.
					m.seedVersion(ctx)
					m.announce(ctx, m.clientAddr)
				}
			})
		})
	})
	cfg.warnInsecure(m.log)
	m.log.Info("started", "client", m.clientAddr, "raft", cfg.RaftAddr, "http", cfg.HTTPAddr, "raft-log", m.store.Kind())
	return m, nil
}

// metaGroup is the metaserver's view of the node's Raft group.
type metaGroup struct{ m *MetaNode }

func (g metaGroup) Propose(ctx context.Context, cmd meta.Command) error {
	_, err := g.m.propose(ctx, meta.Encode(cmd))
	return err
}

func (g metaGroup) Leader() bool                      { return g.m.isLeader() }
func (g metaGroup) NotLeader() error                  { return g.m.notLeader() }
func (g metaGroup) Barrier(ctx context.Context) error { return g.m.barrier(ctx) }
func (g metaGroup) Term() uint64                      { return g.m.raft.CurrentTerm() }
func (g metaGroup) Status() transport.Status          { return g.m.Status() }

func (g metaGroup) Membership(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	switch t {
	case transport.TypeJoin:
		return g.m.handleJoin(ctx, p)
	case transport.TypeLeave:
		return g.m.handleLeave(ctx, p)
	case transport.TypeTransfer:
		return g.m.handleTransfer(p)
	case transport.TypeSetVersion:
		return g.m.handleSetVersion(ctx, p)
	case transport.TypeBackup:
		return g.m.handleBackup(ctx, p)
	}
	return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(t))
}

// Raft exposes the Raft node, for tests and admin tools.
func (m *MetaNode) Raft() *raft.Raft { return m.raft }

// Status reports the node's Raft position, the metaserver group, the
// node's last snapshot and its data disk's free bytes.
func (m *MetaNode) Status() Status {
	s := m.withSnapshot(m.status(m.fsm.Applied(), m.clientAddr))
	s.ActiveVersion = m.fsm.ActiveVersion()
	if free, err := disk.Free(m.cfg.DataDir); err == nil {
		s.DiskFree = free
	}
	return s
}

// applyFailed hears that the state machine stopped applying (an entry of
// a newer release): the node stops, and says so through Failed.
func (m *MetaNode) applyFailed(err error) {
	m.stop(err, func() {
		m.log.Error("the node stops: its state machine stopped applying (run the release the error names; a restart replays from the last snapshot)", "error", err)
		m.Close()
	})
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
