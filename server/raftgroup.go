package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// RaftTiming is a Raft group's timing.
type RaftTiming struct {
	HeartbeatTimeout  time.Duration
	ElectionTimeout   time.Duration
	LeaderLease       time.Duration
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
}

// SetElectionTimeout sets the heartbeat and election timeouts to d and the
// leader lease to half of it: the one knob operators turn.
func (t *RaftTiming) SetElectionTimeout(d time.Duration) {
	t.HeartbeatTimeout, t.ElectionTimeout, t.LeaderLease = d, d, d/2
}

// raftGroup is what a broker node and a metaserver node share: a Raft node
// with its log store and transport, proposals, leadership, and the
// membership requests an operator sends to a group.
type raftGroup struct {
	id, group    string
	log          hclog.Logger
	applyTimeout time.Duration
	// dial is how the node dials other nodes' client ports (joins, clock
	// readings, the metaserver): over TLS when the node has a certificate.
	dial transport.Dialer
	// sec is what the node's status says of its transport security.
	sec security

	raft *raft.Raft
	// raftNode is raft, for goroutines that may run before it is set.
	raftNode atomic.Pointer[raft.Raft]
	store    *raftlog.Store
	trans    *raft.NetworkTransport
	fence    *heartbeatFence // trans, as Raft is given it
	snaps    raft.SnapshotStore
	// backups are the snapshots the node holds open for backups.
	backups  *backups
	leaderCh chan bool
	// leading is what leaderCh said last: whether the node leads. The log
	// cache holds entries only while it does.
	leading atomic.Bool

	// committed, if set, observes the time from proposing a command (its
	// type byte) to the state machine's beginning to apply it, as
	// applyBegan recorded (propose.go, timedFuture).
	committed func(cmd byte, d time.Duration)
	// applyBegan, if set, is when the state machine began applying each
	// recent entry (see applyTimes).
	applyBegan *applyTimes

	// memberAddr returns a member's client address from the group's state.
	memberAddr func(id string) string
	// setMember encodes the command that records a member's client address
	// ("" forgets the member).
	setMember func(id, clientAddr string) []byte
	// joinerOK, if set, refuses a joining node by its status, besides
	// the checks every group makes (checkJoiner).
	joinerOK func(st *transport.Status) error
	// versions, if set, is how the group's state machine holds its active
	// version Number (handleSetVersion, joinerSupportsActive); gateMu
	// keeps a raise of it and a join from interleaving.
	versions *groupVersions
	gateMu   sync.Mutex
	// build, if set, is the version Numbers the node supports, when its
	// state machine applies fewer than version.Build() (a test's stand-in
	// for a node of an earlier release); see supports.
	build version.Range
	// initial, if set, is the active Number a group this node bootstraps
	// starts at (Config.InitialVersion); 0: the build's newest.
	initial version.Number
	// bootstrapped: open ran raft.BootstrapCluster, so this node formed
	// the group at this start, and its first term raises the group's
	// active Number (seedVersion, which clears it).
	bootstrapped atomic.Bool
}

// raftSetup is how to open a raftGroup.
type raftSetup struct {
	dir, addr string
	bootstrap bool
	timing    RaftTiming
	fsm       raft.FSM
	snaps     raft.SnapshotStore
	// ownCheckpoint skips restoring the last snapshot on start: the state
	// machine keeps its own (see fsm/DESIGN.md).
	ownCheckpoint bool
	// advertise is the Raft address handed to the group, if not addr.
	advertise string
	// raftLog is the log store a new data directory gets; one that holds
	// a log keeps its own (see raftlog.Open). Unused if the group's store
	// was opened before.
	raftLog raftlog.Kind
	// logCache is the bytes of recent entries kept in memory in front of
	// the log store (see raftlog.NewCache); 0 keeps none.
	logCache int64
	// tls makes Raft's connections TLS, between nodes of its CA only;
	// nil: plaintext.
	tls *tlsconf.Reloader
	// backupKind is what the group's snapshots hold
	// (transport.BackupBroker or BackupMeta), and backups bound the
	// backups the node serves.
	backupKind byte
	backups    BackupLimits
}

func (g *raftGroup) open(s raftSetup) error {
	var err error
	g.leaderCh = make(chan bool, 16)
	g.snaps = s.snaps
	if g.store == nil {
		if g.store, err = raftlog.Open(s.dir, s.raftLog, g.log); err != nil {
			return err
		}
	}
	if g.trans, err = newRaftTransport(s.addr, s.advertise, s.tls, g.log.Named("raft-net")); err != nil {
		return err
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(g.id)
	rc.Logger = g.log.Named("raft")
	rc.HeartbeatTimeout = s.timing.HeartbeatTimeout
	rc.ElectionTimeout = s.timing.ElectionTimeout
	rc.LeaderLeaseTimeout = s.timing.LeaderLease
	rc.SnapshotInterval = s.timing.SnapshotInterval
	rc.SnapshotThreshold = s.timing.SnapshotThreshold
	rc.TrailingLogs = s.timing.TrailingLogs
	rc.NotifyCh = g.leaderCh
	// Let proposals queue while the leader writes the previous ones, so they
	// share the next disk write. Apply's own timeout is loosened by this;
	// every proposal is still bounded by the caller's context.
	rc.BatchApplyCh = true
	rc.NoSnapshotRestoreOnStart = s.ownCheckpoint
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("server: raft config: %w", err)
	}
	has, err := raft.HasExistingState(g.store.Logs(), g.store.Stable(), s.snaps)
	if err != nil {
		return fmt.Errorf("server: check raft state: %w", err)
	}
	empty, err := raftStoreEmpty(g.store)
	if err != nil {
		return err
	}
	g.fence = &heartbeatFence{NetworkTransport: g.trans}
	var trans raft.Transport = g.fence
	switch {
	case !has && s.bootstrap:
		cfg := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: g.trans.LocalAddr()}}}
		if err := raft.BootstrapCluster(rc, g.store.Logs(), g.store.Stable(), s.snaps, g.trans, cfg); err != nil {
			return fmt.Errorf("server: bootstrap: %w", err)
		}
		g.bootstrapped.Store(true)
	case empty:
		// A new member, or a member whose store was emptied: no vote
		// before it has caught up (see voteGuard).
		trans = newVoteGuard(g.fence, g.log.Named("raft-net"), func() uint64 {
			if r := g.raftNode.Load(); r != nil {
				return r.LastIndex()
			}
			return 0
		})
	}
	// Followers are fed from memory: without a cache the leader reads every
	// entry back from the store (and decodes it) to replicate it. The cache
	// is bounded by bytes, since an entry may be a whole batch of sends.
	logs := raftlog.NewCache(g.store.Logs(), s.logCache, g.leading.Load)
	if g.raft, err = raft.NewRaft(rc, s.fsm, logs, g.store.Stable(), s.snaps, trans); err != nil {
		return fmt.Errorf("server: start raft: %w", err)
	}
	g.raftNode.Store(g.raft)
	g.backups = newBackups(s.backupKind, g.group, s.backups, s.snaps, g.raftNode.Load)
	return nil
}

// shutdown stops Raft; closeStores then closes its transport and log.
func (g *raftGroup) shutdown() error {
	if g.raft == nil {
		return nil
	}
	g.backups.close()
	return g.raft.Shutdown().Error()
}

func (g *raftGroup) closeStores() []error {
	var errs []error
	if g.fence != nil {
		g.fence.fence() // no heartbeat handler may reach the store once closed
	}
	if g.trans != nil {
		errs = append(errs, g.trans.Close())
	}
	if g.store != nil {
		errs = append(errs, g.store.Close())
	}
	return errs
}

// barrier waits until every entry committed before it is applied, or ctx
// ends. A barrier Raft accepts while shutting down may never be answered,
// so the wait is on ctx too (the goroutine left waiting ends with Raft).
func (g *raftGroup) barrier(ctx context.Context) error {
	f := g.raft.Barrier(g.applyTimeout)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// caughtUp waits, retrying a barrier, until every entry committed before
// the call is applied to the state machine; false if ctx ended first. Raft's
// applied index is no such wait: it moves when entries are handed to the
// state machine, before they are applied.
func (g *raftGroup) caughtUp(ctx context.Context) bool {
	for g.barrier(ctx) != nil {
		if !wait.Sleep(ctx, 100*time.Millisecond) {
			return false
		}
	}
	return true
}

func (g *raftGroup) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.applyTimeout)
}

// status reports the node's Raft position and its group's members.
func (g *raftGroup) status(applied uint64, clientAddr string) Status {
	stats := g.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	_, leaderID := g.raft.LeaderWithID()
	s := Status{
		ID: g.id, Group: g.group, State: g.raft.State().String(),
		Leader: string(leaderID), Term: num("term"), CommitIndex: num("commit_index"),
		AppliedIndex: applied, LastIndex: g.raft.LastIndex(),
		ClientAddr: clientAddr, RaftAddr: string(g.trans.LocalAddr()),
		TLS: g.sec.tls, Insecure: g.sec.insecure, Auth: g.sec.auth,
	}
	if leaderID != "" {
		s.LeaderAddr = g.memberAddr(string(leaderID))
	}
	if f := g.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			s.Members = append(s.Members, Member{ID: string(srv.ID), RaftAddr: string(srv.Address),
				ClientAddr: g.memberAddr(string(srv.ID)), Suffrage: srv.Suffrage.String()})
		}
	}
	return s
}

// lastSnapshot is the newest snapshot the node holds: its Raft index and
// term, and when it was taken (from its id, TERM-INDEX-UNIXMILLIS, which
// both snapshot stores give it); zero if it holds none or cannot tell.
// It reads the store's directory: for Status, not for membership.
func (g *raftGroup) lastSnapshot() (index, term uint64, at time.Time) {
	if g.snaps == nil {
		return 0, 0, time.Time{}
	}
	metas, err := g.snaps.List()
	if err != nil || len(metas) == 0 {
		return 0, 0, time.Time{}
	}
	m := metas[0]
	if i := strings.LastIndexByte(m.ID, '-'); i >= 0 {
		if ms, err := strconv.ParseInt(m.ID[i+1:], 10, 64); err == nil && ms > 0 {
			at = time.UnixMilli(ms).UTC()
		}
	}
	return m.Index, m.Term, at
}

// withSnapshot adds the node's last snapshot to s.
func (g *raftGroup) withSnapshot(s Status) Status {
	s.LastSnapshotIndex, s.LastSnapshotTerm, s.LastSnapshotAt = g.lastSnapshot()
	s.Backups = g.backups.count()
	build := g.supports()
	s.Versions = &build
	return s
}

// watchLeadership runs lead while this node leads, cancelling its context
// the moment leadership is lost; changed is called on every change.
func (g *raftGroup) watchLeadership(ctx context.Context, changed func(), lead func(ctx context.Context)) {
	var cancel context.CancelFunc
	stop := func() {
		if cancel != nil {
			cancel()
			cancel = nil
		}
	}
	defer stop()
	for {
		select {
		case leader := <-g.leaderCh:
			g.leading.Store(leader)
			changed()
			switch {
			case leader && cancel == nil:
				g.log.Info("became leader")
				cancel = startTerm(ctx, lead)
			case !leader && cancel != nil:
				g.log.Info("lost leadership")
				stop()
			}
		case <-ctx.Done():
			return
		}
	}
}

// startTerm runs lead with a context of its own and returns its cancel.
func startTerm(ctx context.Context, lead func(ctx context.Context)) context.CancelFunc {
	ctx, cancel := context.WithCancel(ctx)
	lead(ctx)
	return cancel
}

// announce records this node's client address in the group's state if it
// is missing or stale (a bootstrapped node, or one that moved).
func (g *raftGroup) announce(ctx context.Context, clientAddr string) {
	if g.memberAddr(g.id) == clientAddr {
		return
	}
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	if _, err := g.propose(ctx, g.setMember(g.id, clientAddr)); err != nil {
		g.log.Warn("recording this node's client address", "error", err)
	}
}

// HandOverLeadership, on a leader whose group has another voter, hands
// leadership to the most up-to-date voter and waits until that one has it,
// or ctx ends; on any other node it returns nil at once. qmqd calls it on
// SIGTERM before Close, so that a leader stopped by its service manager
// (systemd, Compose, the kubelet) costs its clients one quick handover, a
// round trip or two, instead of an election timeout with no leader.
func (g *raftGroup) HandOverLeadership(ctx context.Context) error {
	if g.raft == nil || !g.isLeader() || !g.hasOtherVoter() {
		return nil
	}
	f := g.raft.LeadershipTransfer()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("server: handing leadership of %s over: %w", g.group, err)
		}
		_, to := g.raft.LeaderWithID()
		g.log.Info("leadership handed over before stopping", "to", string(to))
		return nil
	case <-ctx.Done():
		return fmt.Errorf("server: handing leadership of %s over: %w", g.group, ctx.Err())
	}
}

// hasOtherVoter reports whether the group's configuration has a voter
// besides this node.
func (g *raftGroup) hasOtherVoter() bool {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != g.id {
			return true
		}
	}
	return false
}
