package server

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// Node is one member of a broker group: a Raft node over the broker state
// machine, a client listener and an admin HTTP listener.
type Node struct {
	raftGroup
	host
	cfg Config
	log hclog.Logger

	fsm *fsm.FSM

	meta        *transport.LeaderClient    // nil without a metaserver
	writable    atomic.Bool                // false while the metaserver drains the group
	kept        atomic.Bool                // the writable flag the Raft store holds (writable.go)
	sendGate    sync.RWMutex               // a send checks sendRefusal and queues under its read lock (refusal.go)
	appliedTerm atomic.Uint64              // the leader term whose predecessors' entries are all applied
	apps        atomic.Pointer[auth.Table] // the metaserver's, from its heartbeat replies; nil until the first
	guard       *guard
	// refusing is why the node serves no client while its authentication
	// and its metaserver's disagree (compareAuth), nil while they agree.
	refusing    atomic.Pointer[string]
	heartbeatMu sync.Mutex       // one heartbeat to the metaserver at a time
	forgotten   *forgottenGroups // nil without a metaserver, or without Auth
	// appsAsked is when refreshApps last asked the metaserver; guarded by appsAskMu.
	appsAskMu sync.Mutex
	appsAsked time.Time

	batcher  *batcher
	sessions *sessions
	inbox    atomic.Pointer[scheduleInbox] // the leading term's, else nil
	clock    termClock                     // what the leader stamps and fires by
	notify   *notifier
	metrics  *metrics

	disk         *diskGuard
	applyWaiting atomic.Bool // the state machine waits for disk space
	selfStop
}

// New opens the node's storage, starts Raft and its listeners.
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// n is not the named result: every failure returns nil, and the
	// deferred Close below must still see the node.
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID, "broker_group", cfg.BrokerGroup), selfStop: newSelfStop()}
	n.host = newHost(n.log)
	n.filesReserved = cfg.FSM.MaxOpenFiles
	n.clock.wall = cfg.Now
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := n.listen(cfg.DataDir, cfg.ClientAddr, cfg.AdvertiseAddr, cfg.TLS); err != nil {
		return nil, err
	}
	// The metrics before Raft: the state machine observes each entry it
	// applies from the first replayed on.
	n.metrics = newMetrics(n)
	if err := n.openRaft(); err != nil {
		return nil, err
	}
	n.committed = func(cmd byte, d time.Duration) {
		n.metrics.commitSeconds.WithLabelValues(fsm.CommandType(cmd).String()).Observe(d.Seconds())
	}
	n.notify = newNotifier()
	n.sessions = newSessions(n)
	n.batcher = newBatcher(n)
	n.guard = newGuard(cfg.Auth, n.apps.Load, newAuditLog(n.log), n.metrics.registry)
	n.guard.refresh = n.refreshApps
	n.guard.closed = n.refusal
	if err := n.serve(n.handle, n.guard, cfg.ClientLimits, cfg.HTTPAddr, cfg.OpenHTTP, func() any { return n.Status() }, n.ready, n.metrics.registry); err != nil {
		return nil, err
	}
	if err := n.startMetaLink(); err != nil {
		return nil, err
	}
	n.goLoop(n.batcher.run)
	n.goLoop(func() { n.watchLeadership(n.ctx, n.metrics.leaderChanges.Inc, n.startLeading) })
	n.goLoop(func() { n.keepAddressRecorded(n.ctx) })
	// The configuration the state machine applies by: the group's, or
	// until it has one the defaults (a new group) or this node's own (a
	// state from an earlier release).
	bc := n.fsm.BrokerConfig()
	cfg.warnInsecure(n.log)
	n.log.Info("started", append([]any{"client", n.clientAddr, "raft", cfg.RaftAddr, "http", cfg.HTTPAddr, "raft-log", n.store.Kind(),
		"broker-config", bc.Source.String()}, brokerConfigKeys(bc.BrokerConfig)...)...)
	return n, nil
}

func (n *Node) openRaft() error {
	// The Raft log first: it locks the data directory against a second
	// process before the state machine's logs are opened (and cut back to
	// their checkpoint).
	store, err := raftlog.Open(n.cfg.DataDir, n.cfg.RaftLog, n.log)
	if err != nil {
		return err
	}
	n.raftGroup.store = store
	fcfg := n.cfg.FSM
	fcfg.Dir = filepath.Join(n.cfg.DataDir, "fsm")
	fcfg.Logger = n.log
	fcfg.OnDiskWait, fcfg.OnFatal, fcfg.OnIdentity = n.diskWait, n.storageFailed, n.storeIdentity
	fcfg.OnApplied = n.applied
	fcfg.Group = n.cfg.BrokerGroup
	n.disk = &diskGuard{probe: fcfg.DiskFree, dir: n.cfg.DataDir, min: n.cfg.MinFreeDisk}
	if n.fsm, err = fsm.Open(fcfg); err != nil {
		return err
	}
	n.fsm.OnSchedule(n.scheduled)
	snaps, err := fsm.NewSnapshotStore(filepath.Join(n.cfg.DataDir, "snapshots"), 2, n.log)
	if err != nil {
		return err
	}
	if err := n.checkIdentity(); err != nil {
		return err
	}
	if err := n.fsm.CatchUp(snaps); err != nil {
		return err
	}
	if err := n.checkLogVersions(store); err != nil {
		return err
	}
	if err := n.checkHistory(snaps); err != nil {
		return err
	}
	n.raftGroup = raftGroup{
		id: n.cfg.ID, group: n.cfg.BrokerGroup, log: n.log, applyTimeout: n.cfg.ApplyTimeout, store: store, dial: n.dialer(n.cfg.SourceIP),
		sec:        n.cfg.security(),
		memberAddr: n.fsm.MemberAddr,
		setMember: func(id, addr string) []byte {
			return (&fsm.SetMember{ID: id, ClientAddr: addr}).Encode()
		},
		joinerOK:   n.joinerKnowsBrokerConfig,
		applyBegan: newApplyTimes(),
		versions: &groupVersions{
			active:  n.fsm.ActiveVersion,
			command: func(v version.Number) []byte { return (&fsm.SetVersion{Version: v}).Encode() },
			need:    fsm.CommandNeeds,
		},
		build:   n.fsm.Supports(),
		initial: n.cfg.InitialVersion,
	}
	return n.open(raftSetup{dir: n.cfg.DataDir, addr: n.cfg.RaftAddr, advertise: n.cfg.RaftAdvertiseAddr, bootstrap: n.cfg.Bootstrap,
		timing: n.cfg.RaftTiming, fsm: n.fsm, snaps: snaps, ownCheckpoint: true, logCache: n.cfg.RaftLogCache, tls: n.tls.reloader(),
		backupKind: transport.BackupBroker, backups: n.cfg.Backups})
}

// Raft exposes the Raft node, for tests and admin tools.
func (n *Node) Raft() *raft.Raft { return n.raft }

// FSM exposes the state machine, for tests and admin tools.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Close stops the node: listeners, leader loops, Raft, storage. Idempotent.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if !n.beginClose() {
		return nil
	}
	if n.fsm != nil {
		n.fsm.Interrupt() // a wait for disk space must not hold Raft's shutdown up
	}
	errs := []error{n.shutdown()}
	n.wg.Wait()
	errs = append(errs, n.closeStores()...)
	if n.fsm != nil {
		errs = append(errs, n.fsm.Close())
	}
	if n.meta != nil {
		n.meta.Close()
	}
	n.log.Info("stopped")
	return errors.Join(errs...)
}
