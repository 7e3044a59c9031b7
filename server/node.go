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
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// Node is one member of a broker group: a Raft node over the broker state
// machine, a client listener and an admin HTTP listener.
type Node struct {
	raftGroup
	cfg Config
	log hclog.Logger

	fsm *fsm.FSM

	client     *transport.Server
	clientLis  net.Listener
	clientAddr string // advertised
	httpSrv    *http.Server
	httpLis    net.Listener

	meta     *transport.GroupClient // nil without a metaserver
	writable atomic.Bool            // false while the metaserver drains the group

	batcher  *batcher
	sessions *sessions
	notify   *notifier
	metrics  *metrics

	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

// New opens the node's storage, starts Raft and its listeners.
func New(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// n is not the named result: every failure returns nil, and the
	// deferred Close below must still see the node.
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID, "group", cfg.Group)}
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
	if err := n.startMetaLink(); err != nil {
		return nil, err
	}
	n.goLoop(n.batcher.run)
	n.goLoop(func() { n.watchLeadership(n.ctx, n.metrics.leaderChanges.Inc, n.startLeading) })
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
	snaps, err := fsm.NewSnapshotStore(filepath.Join(n.cfg.DataDir, "snapshots"), 2, n.log)
	if err != nil {
		return err
	}
	if err := n.fsm.CatchUp(snaps); err != nil {
		return err
	}
	n.raftGroup = raftGroup{
		id: n.cfg.ID, group: n.cfg.Group, log: n.log, applyTimeout: n.cfg.ApplyTimeout,
		memberAddr: n.fsm.MemberAddr,
		setMember: func(id, addr string) []byte {
			return (&fsm.SetMember{ID: id, ClientAddr: addr}).Encode()
		},
	}
	return n.open(raftSetup{dir: n.cfg.DataDir, addr: n.cfg.RaftAddr, bootstrap: n.cfg.Bootstrap,
		timing: n.cfg.RaftTiming, fsm: n.fsm, snaps: snaps, ownCheckpoint: true})
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
	errs = append(errs, n.shutdown())
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
