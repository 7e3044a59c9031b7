package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// Node is one member of a broker group: a Raft node over the broker state
// machine, a client listener and an admin HTTP listener.
type Node struct {
	cfg Config
	log hclog.Logger

	fsm   *fsm.FSM
	raft  *raft.Raft
	bolt  *raftboltdb.BoltStore
	trans *raft.NetworkTransport

	client     *transport.Server
	clientLis  net.Listener
	clientAddr string // advertised
	httpSrv    *http.Server
	httpLis    net.Listener

	batcher  *batcher
	sessions *sessions
	notify   *notifier
	metrics  *metrics

	leaderCh chan bool
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	closeMu  sync.Mutex
	closed   bool
}

// New opens the node's storage, starts Raft and its listeners.
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// n is not the named result: every failure returns nil, and the
	// deferred Close below must still see the node.
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID, "group", cfg.Group), leaderCh: make(chan bool, 16)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("server: create data directory: %w", err)
	}
	if n.clientLis, err = net.Listen("tcp", cfg.ClientAddr); err != nil {
		return nil, fmt.Errorf("server: listen for clients: %w", err)
	}
	n.clientAddr = cfg.AdvertiseAddr
	if n.clientAddr == "" {
		n.clientAddr = n.clientLis.Addr().String()
	}
	if err := n.openRaft(); err != nil {
		return nil, err
	}
	n.metrics = newMetrics(n)
	n.notify = newNotifier()
	n.sessions = newSessions(n)
	n.batcher = newBatcher(n)
	n.client = &transport.Server{Handler: n.handle, Logger: n.log.Named("client")}
	n.goLoop(func() {
		if err := n.client.Serve(n.clientLis); err != nil {
			n.log.Error("client listener stopped", "error", err)
		}
	})
	if cfg.HTTPAddr != "" {
		if err := n.serveHTTP(); err != nil {
			return nil, err
		}
	}
	n.goLoop(n.batcher.run)
	n.goLoop(n.watchLeadership)
	n.log.Info("started", "client", n.clientAddr, "raft", cfg.RaftAddr, "http", cfg.HTTPAddr)
	return n, nil
}

func (n *Node) goLoop(fn func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		fn()
	}()
}

func (n *Node) openRaft() error {
	var err error
	fcfg := n.cfg.FSM
	fcfg.Dir = filepath.Join(n.cfg.DataDir, "fsm")
	fcfg.Logger = n.log
	if n.fsm, err = fsm.Open(fcfg); err != nil {
		return err
	}
	n.bolt, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(n.cfg.DataDir, "raft.db"),
		// Without these, bolt rewrites its whole freelist on every commit.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return fmt.Errorf("server: open raft log: %w", err)
	}
	snaps, err := fsm.NewSnapshotStore(filepath.Join(n.cfg.DataDir, "snapshots"), 2, n.log)
	if err != nil {
		return err
	}
	if err := n.fsm.CatchUp(snaps); err != nil {
		return err
	}
	advertise, err := net.ResolveTCPAddr("tcp", n.cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("server: raft address: %w", err)
	}
	n.trans, err = raft.NewTCPTransportWithLogger(n.cfg.RaftAddr, advertise, 8, 10*time.Second, n.log.Named("raft-net"))
	if err != nil {
		return fmt.Errorf("server: listen for raft: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.Logger = n.log.Named("raft")
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLease
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.NotifyCh = n.leaderCh
	// Let proposals queue while the leader writes the previous ones, so they
	// share the next disk write. Apply's own timeout is loosened by this;
	// every proposal is still bounded by the caller's context.
	rc.BatchApplyCh = true
	// The state machine keeps its own checkpoint; restoring the last snapshot
	// on start would only redo work (see fsm/DESIGN.md).
	rc.NoSnapshotRestoreOnStart = true
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("server: raft config: %w", err)
	}
	if n.cfg.Bootstrap {
		has, err := raft.HasExistingState(n.bolt, n.bolt, snaps)
		if err != nil {
			return fmt.Errorf("server: check raft state: %w", err)
		}
		if !has {
			cfg := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: n.trans.LocalAddr()}}}
			if err := raft.BootstrapCluster(rc, n.bolt, n.bolt, snaps, n.trans, cfg); err != nil {
				return fmt.Errorf("server: bootstrap: %w", err)
			}
		}
	}
	// Followers are fed from memory: without a cache the leader reads every
	// entry back from bolt (and decodes it) to replicate it.
	logs, err := raft.NewLogCache(1024, n.bolt)
	if err != nil {
		return fmt.Errorf("server: raft log cache: %w", err)
	}
	if n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.bolt, snaps, n.trans); err != nil {
		return fmt.Errorf("server: start raft: %w", err)
	}
	return nil
}

// ClientAddr returns the address clients should use for this node.
func (n *Node) ClientAddr() string { return n.clientAddr }

// HTTPAddr returns the admin listener's address, or "".
func (n *Node) HTTPAddr() string {
	if n.httpLis == nil {
		return ""
	}
	return n.httpLis.Addr().String()
}

// Raft exposes the Raft node, for tests and admin tools.
func (n *Node) Raft() *raft.Raft { return n.raft }

// FSM exposes the state machine, for tests and admin tools.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Close stops the node: listeners, leader loops, Raft, storage. Idempotent.
func (n *Node) Close() error {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	n.cancel()
	var errs []error
	if n.client != nil {
		n.client.Close()
	} else if n.clientLis != nil {
		n.clientLis.Close()
	}
	if n.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n.httpSrv.Shutdown(ctx)
		cancel()
	}
	if n.raft != nil {
		if err := n.raft.Shutdown().Error(); err != nil {
			errs = append(errs, err)
		}
	}
	n.wg.Wait()
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.bolt != nil {
		errs = append(errs, n.bolt.Close())
	}
	if n.fsm != nil {
		errs = append(errs, n.fsm.Close())
	}
	n.log.Info("stopped")
	return errors.Join(errs...)
}
