package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/test/poll"
)

// TestCluster runs the FSM under real Raft: three voters on loopback TCP,
// each with a BoltDB log store and this package's hard-link snapshot store.
// Each node is opened with its own segment sizes, pull and unacked bounds
// and dedup window; the leader's first command sets the group's
// configuration, which every replica goes by. It checks the commands'
// responses against a small model, kills and restarts a follower, moves
// leadership, installs a snapshot on a fresh fourth node, and finally
// requires every replica to hold byte-identical logs. Set
// QMQ_CLUSTER_LOG=debug (or info) to see Raft's logs.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test skipped in -short mode")
	}
	c := newClusterT(t)

	step := func(name string, fn func(t *testing.T)) {
		if !t.Run(name, fn) {
			t.FailNow()
		}
	}

	step("bootstrap", func(t *testing.T) {
		var servers []raft.Server
		for i := range 3 {
			n := c.newNode(t, i+1)
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: n.id, Address: n.addr})
		}
		for _, n := range c.nodes {
			c.start(t, n, &raft.Configuration{Servers: servers})
		}
		c.waitLeader(t, nil)
		c.apply(t, c.leader, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: clusterConfig(1).BrokerConfig()})
	})

	step("append-pull-ack-reclaim", func(t *testing.T) {
		l := c.leader
		c.send(t, l, 3000, 100)
		c.checkMessages(t, l)

		// Two groups on one subject: each group gets every message.
		if got := c.pull(t, l, "orders", "g1", "c1", 50); len(got) != 50 || got[0].ConsumeSeq != 0 {
			t.Fatalf("g1/c1 first pull: %v", got)
		}
		if got := c.pull(t, l, "orders", "g1", "c2", 30); len(got) != 30 || got[0].ConsumeSeq != 50 {
			t.Fatalf("g1/c2 first pull: %v", got)
		}
		if got := c.pull(t, l, "orders", "g2", "c1", 100); len(got) != 100 || got[0].ConsumeSeq != 0 {
			t.Fatalf("g2/c1 first pull: %v", got)
		}
		c.pull(t, l, "payments", "g1", "c1", 40)
		// Enough pulls that the pull log has several segments.
		for _, subject := range clusterSubjects {
			if got := c.pull(t, l, subject, "g3", "c1", 700); len(got) != 700 {
				t.Fatalf("%s/g3/c1 pulled %d entries, want 700", subject, len(got))
			}
		}

		// Acks out of order: the ack position only passes contiguous acks.
		c.ack(t, l, "orders", "g1", "c1", 5, message.AckRange{First: 10, Last: 19}, message.AckRange{First: 0, Last: 4})
		c.ack(t, l, "orders", "g1", "c1", 5, message.AckRange{First: 30, Last: 30})
		c.ack(t, l, "orders", "g1", "c1", 20, message.AckRange{First: 5, Last: 9})
		c.ack(t, l, "orders", "g2", "c1", 0, message.AckRange{First: 50, Last: 99})
		c.ack(t, l, "payments", "g1", "c1", 40, message.AckRange{First: 20, Last: 39}, message.AckRange{First: 0, Last: 19})
		c.ackInvalid(t, l, "orders", "g1", "c1", message.AckRange{First: 40, Last: 60}) // past what was pulled
		c.ackInvalid(t, l, "orders", "g1", "nobody", message.AckRange{First: 0, Last: 0})

		// c2 acks part of its entries and goes away; c1 gets the rest first.
		c.ack(t, l, "orders", "g1", "c2", 10, message.AckRange{First: 0, Last: 9})
		if n := c.reclaim(t, l, "orders", "g1", "c2"); n != 20 {
			t.Fatalf("reclaim returned %d entries, want 20", n)
		}
		got := c.pull(t, l, "orders", "g1", "c1", 30)
		if got[0].ConsumeSeq != 60 || got[19].ConsumeSeq != 79 || got[20].ConsumeSeq != 80 {
			t.Fatalf("pull after reclaim: %v", got)
		}
		if n := c.reclaim(t, l, "orders", "g1", "never-pulled"); n != 0 {
			t.Fatalf("reclaim of an unknown consumer returned %d", n)
		}
		if res := c.apply(t, l, &Pull{Start: StartEarliest, Now: c.now(), Subject: "orders", ConsumerGroup: "g1", Consumer: "c1", Max: 0}); !errors.Is(clusterAsError(res), ErrInvalid) {
			t.Fatalf("pull of 0 entries: %v", res)
		}
		c.waitApplied(t, c.running()...)
		c.checkReplicas(t, c.leaderFirst())
	})

	step("consumer-groups", func(t *testing.T) {
		c.consumerGroups(t, c.leader, "rg")
		c.waitApplied(t, c.running()...)
		c.checkReplicas(t, c.leaderFirst())
	})

	var restarted *clusterNode
	step("restart-follower", func(t *testing.T) {
		l := c.leader
		f := c.follower(t)
		// A snapshot on the follower writes its checkpoint; what it applies
		// afterwards is cut back on reopen and replayed from its Raft log.
		snap := f.raft.Snapshot()
		if err := snap.Error(); err != nil {
			t.Fatalf("follower snapshot: %v", err)
		}
		meta, rc, err := snap.Open()
		if err != nil {
			t.Fatalf("open follower snapshot: %v", err)
		}
		rc.Close()
		c.send(t, l, 150, 50)
		c.pull(t, l, "audit.log", "g1", "c1", 25)
		c.waitApplied(t, c.running()...)

		f.stop(t)
		c.send(t, l, 300, 100)
		c.pull(t, l, "orders", "g2", "c1", 200)
		c.ack(t, l, "orders", "g2", "c1", 200, message.AckRange{First: 100, Last: 199}, message.AckRange{First: 0, Last: 49})
		c.pull(t, l, "payments", "g2", "c9", 10)
		c.consumerGroups(t, l, "rg2") // replayed by the follower on restart

		c.start(t, f, nil)
		if f.openedAt == 0 || f.openedAt > meta.Index {
			t.Fatalf("restarted FSM opened at applied index %d; its checkpoint is at or below snapshot index %d", f.openedAt, meta.Index)
		}
		c.waitApplied(t, f)
		c.checkMessages(t, f)
		c.checkReplicas(t, []*clusterNode{l, f})
		restarted = f
	})

	step("leadership-transfer", func(t *testing.T) {
		old := c.leader
		// Move leadership to the restarted node: its dedup window was rebuilt
		// from its checkpoint and the message log, and now decides.
		if err := old.raft.LeadershipTransferToServer(restarted.id, restarted.addr).Error(); err != nil {
			t.Fatalf("leadership transfer: %v", err)
		}
		c.waitLeader(t, restarted)
		l := c.leader
		c.send(t, l, 300, 100)
		c.pull(t, l, "orders", "g1", "c1", 100)
		c.ack(t, l, "orders", "g1", "c1", 20, message.AckRange{First: 50, Last: 80})
		c.pull(t, l, "orders", "g3", "c1", 10)

		// Ids sent before, sent again through the new leader, are duplicates.
		c.sendDuplicates(t, l, 5, 10, 1999)
		c.waitApplied(t, c.running()...)
		c.checkReplicas(t, c.leaderFirst())
	})

	step("snapshot-install", func(t *testing.T) {
		l := c.leader
		snap := l.raft.Snapshot()
		if err := snap.Error(); err != nil {
			t.Fatalf("leader snapshot: %v", err)
		}
		meta, rc, err := snap.Open()
		if err != nil {
			t.Fatalf("open leader snapshot: %v", err)
		}
		rc.Close()
		c.send(t, l, 120, 40)
		c.pull(t, l, "payments", "g1", "c1", 30)
		first, err := l.store.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first <= 1 {
			t.Fatalf("leader's log starts at %d after a snapshot at %d: not compacted", first, meta.Index)
		}

		n := c.newNode(t, 4)
		c.start(t, n, nil)
		if err := l.raft.AddVoter(n.id, n.addr, 0, 10*time.Second).Error(); err != nil {
			t.Fatalf("add voter: %v", err)
		}
		c.waitApplied(t, n)

		// The new node cannot have replayed index 1: the leader's log starts
		// at first. It must have restored the leader's snapshot.
		if n.openedAt != 0 {
			t.Fatalf("new node's FSM opened at %d, want an empty FSM", n.openedAt)
		}
		snaps, err := n.snaps.List()
		if err != nil || len(snaps) == 0 {
			t.Fatalf("new node holds no snapshot (%v): it did not install one", err)
		}
		if snaps[0].Index < meta.Index {
			t.Fatalf("new node's snapshot is at %d, the leader's at %d", snaps[0].Index, meta.Index)
		}
		if got := n.raft.Stats()["last_snapshot_index"]; got != strconv.FormatUint(snaps[0].Index, 10) {
			t.Fatalf("new node's last snapshot index %s, want %d", got, snaps[0].Index)
		}
		c.checkMessages(t, n)
		c.checkReplicas(t, []*clusterNode{l, n})
	})

	step("restart-restored-node", func(t *testing.T) {
		n := c.nodes[3]
		want := n.fsm.Applied()
		n.stop(t)
		c.send(t, c.leader, 60, 30)
		c.start(t, n, nil)
		if n.openedAt == 0 || n.openedAt > want {
			t.Fatalf("restored node reopened at applied index %d, want its restored checkpoint (1..%d)", n.openedAt, want)
		}
		c.waitApplied(t, n)
	})

	step("quiesce-and-compare", func(t *testing.T) {
		l := c.leader
		c.send(t, l, 90, 30)
		c.pull(t, l, "audit.log", "g2", "c1", 500)
		c.ack(t, l, "audit.log", "g2", "c1", 100, message.AckRange{First: 0, Last: 99})
		nodes := c.leaderFirst()
		if len(nodes) != 4 {
			t.Fatalf("%d nodes running, want 4", len(nodes))
		}
		c.waitApplied(t, nodes...)
		for _, n := range nodes {
			c.checkMessages(t, n)
		}
		c.checkReplicas(t, nodes)
	})
}

// clusterConfig is node i's configuration: the group's (node 1's) has small
// segments so that every log has several, and the defaults the model
// pulls by; the others' differ in every setting of the group
// configuration.
func clusterConfig(i int) Config {
	cfg := DefaultConfig("")
	cfg.SegmentSize, cfg.IndexSegmentSize = clusterSegmentSize, clusterIndexSegmentSize
	if i > 1 {
		cfg.SegmentSize, cfg.IndexSegmentSize = int64(i)<<20, int64(i)<<16
		cfg.MaxPull, cfg.MaxUnacked, cfg.DedupWindow = 10*i, 100*i, time.Duration(i)*time.Minute
		cfg.Retention = logs.Retention{MaxBytes: int64(i) << 20}
	}
	return cfg
}

// Cluster settings: small segments so that every log has several.
const (
	clusterSegmentSize      = 1 << 20
	clusterIndexSegmentSize = 64 << 10
	clusterWaitTimeout      = 20 * time.Second
)

var clusterSubjects = []string{"orders", "payments", "audit.log"}

// clusterSubject returns message number i's subject: half of the messages
// go to orders, so that its consume log has several segments.
func clusterSubject(i int) string {
	return []string{"orders", "orders", "payments", "audit.log"}[i%4]
}

// clusterT is one test's cluster plus a model of what the FSM must answer.
type clusterT struct {
	base   *testing.T
	root   string
	logger hclog.Logger
	nodes  []*clusterNode
	leader *clusterNode
	clock  int64 // leader-stamped time of the last command
	model  clusterModel
}

// clusterNode is one Raft server; its fields are nil while it is stopped.
type clusterNode struct {
	id       raft.ServerID
	dir      string
	addr     raft.ServerAddress
	openedAt uint64 // FSM's applied index when it was last opened
	raft     *raft.Raft
	fsm      *FSM
	store    *raftboltdb.BoltStore
	snaps    *snapshot.Store
	trans    *raft.NetworkTransport
}

func newClusterT(t *testing.T) *clusterT {
	level := hclog.LevelFromString(os.Getenv("QMQ_CLUSTER_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Warn
	}
	w := &clusterLogWriter{t: t}
	t.Cleanup(w.close) // registered first, so it runs after the nodes stop
	c := &clusterT{
		base: t,
		root: t.TempDir(),
		logger: hclog.New(&hclog.LoggerOptions{
			Name: "cluster", Level: level, Output: w, TimeFormat: "15:04:05.000",
		}),
		clock: time.Now().UnixMilli(),
		model: clusterModel{
			ids:       map[string][]string{},
			offsets:   map[string]int64{},
			groups:    map[[2]string]*clusterGroup{},
			consumers: map[[3]string]*clusterConsumer{},
		},
	}
	return c
}

// clusterLogWriter routes hclog output to t.Log until the test ends;
// goroutines that log after that are dropped rather than panic.
type clusterLogWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *clusterLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *clusterLogWriter) close() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// now returns the leader-stamped time of the next command: a fake clock
// one millisecond per command, far inside the dedup window.
func (c *clusterT) now() int64 {
	c.clock++
	return c.clock
}

// newNode creates node i's directory and transport; start brings it up.
//
// The transport is loopback TCP on a port the kernel picks. A node keeps
// its address across restarts, which is what Raft expects of a server: the
// restart listens on the same address again (Go sets SO_REUSEADDR, so
// sockets in TIME_WAIT do not block it), and the peers' pooled connections
// to the old process fail and are redialled. TCP rather than the in-memory
// transport makes the snapshot travel as a real stream, and needs no
// reconnecting of peers by hand.
func (c *clusterT) newNode(t *testing.T, i int) *clusterNode {
	t.Helper()
	n := &clusterNode{id: raft.ServerID(fmt.Sprintf("node%d", i)), dir: filepath.Join(c.root, fmt.Sprintf("node%d", i))}
	n.trans = clusterListen(t, "127.0.0.1:0", c.logger.Named(string(n.id)))
	n.addr = n.trans.LocalAddr()
	c.nodes = append(c.nodes, n)
	c.base.Cleanup(func() {
		if err := n.close(); err != nil {
			c.base.Errorf("%s: stop: %v", n.id, err)
		}
	})
	return n
}

// clusterListen opens a TCP transport on bind. Re-listening on a restarted
// node's port can fail for a moment if the port is still held; it is
// retried for a few seconds, and the test fails with the last error.
func clusterListen(t *testing.T, bind string, logger hclog.Logger) *raft.NetworkTransport {
	t.Helper()
	var trans *raft.NetworkTransport
	var err error
	defer func() {
		if err != nil {
			t.Logf("listen on %s: %v", bind, err)
		}
	}()
	poll.Until(t, 5*time.Second, "a transport listening on "+bind, func() bool {
		trans, err = raft.NewTCPTransportWithLogger(bind, nil, 3, 2*time.Second, logger)
		return err == nil
	})
	return trans
}

func clusterRaftConfig(id raft.ServerID, logger hclog.Logger) *raft.Config {
	conf := raft.DefaultConfig()
	conf.LocalID = id
	conf.Logger = logger
	// Short timeouts so that elections take well under a second, but long
	// enough that a loaded machine running -race keeps a stable leader.
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	conf.LeaderLeaseTimeout = 400 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	// Snapshots are taken explicitly (raft.Snapshot), at points the test
	// chooses; each one compacts the log down to TrailingLogs entries.
	conf.SnapshotInterval = time.Hour
	conf.SnapshotThreshold = 1 << 40
	conf.TrailingLogs = 32
	// The FSM reopens at its own checkpoint; Raft must not restore the
	// local snapshot over it, only skip to its index and replay the rest.
	conf.NoSnapshotRestoreOnStart = true
	return conf
}

// start opens node n's FSM and stores from its directories and starts Raft;
// a non-nil bootstrap configuration bootstraps a new cluster.
func (c *clusterT) start(t *testing.T, n *clusterNode, bootstrap *raft.Configuration) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		n.close()
		t.Fatalf("%s: "+format, append([]any{n.id}, args...)...)
	}
	logger := c.logger.Named(string(n.id))
	var err error
	if n.trans == nil {
		n.trans = clusterListen(t, string(n.addr), logger)
	}
	i, _ := strconv.Atoi(strings.TrimPrefix(string(n.id), "node"))
	cfg := clusterConfig(i)
	cfg.Dir = filepath.Join(n.dir, "fsm")
	cfg.Logger = logger
	if n.fsm, err = Open(cfg); err != nil {
		fail("open FSM: %v", err)
	}
	n.openedAt = n.fsm.Applied()
	n.store, err = raftboltdb.New(raftboltdb.Options{
		Path: filepath.Join(n.dir, "raft.db"),
		BoltOptions: &bbolt.Options{
			Timeout:        5 * time.Second,
			NoFreelistSync: true,
			FreelistType:   bbolt.FreelistMapType,
		},
	})
	if err != nil {
		fail("open raft store: %v", err)
	}
	if n.snaps, err = NewSnapshotStore(filepath.Join(n.dir, "snapshots"), 2, logger); err != nil {
		fail("open snapshot store: %v", err)
	}
	conf := clusterRaftConfig(n.id, logger)
	if bootstrap != nil {
		if err := raft.BootstrapCluster(conf, n.store, n.store, n.snaps, n.trans, *bootstrap); err != nil {
			fail("bootstrap: %v", err)
		}
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, n.store, n.store, n.snaps, n.trans); err != nil {
		fail("start raft: %v", err)
	}
}

// stop shuts node n down as a crash-free stop would: Raft first, then the
// transport, the FSM and the stores.
func (n *clusterNode) stop(t *testing.T) {
	t.Helper()
	if err := n.close(); err != nil {
		t.Fatalf("%s: stop: %v", n.id, err)
	}
}

func (n *clusterNode) close() error {
	var errs []error
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
		n.raft = nil
	}
	if n.trans != nil {
		n.trans.CloseStreams()
		errs = append(errs, n.trans.Close())
		n.trans = nil
	}
	if n.fsm != nil {
		errs = append(errs, n.fsm.Close())
		n.fsm = nil
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
		n.store = nil
	}
	n.snaps = nil
	return errors.Join(errs...)
}

// running returns the nodes that are up.
func (c *clusterT) running() []*clusterNode {
	var out []*clusterNode
	for _, n := range c.nodes {
		if n.raft != nil {
			out = append(out, n)
		}
	}
	return out
}

// waitLeader waits until a running node is leader (want, if not nil) and
// records it.
func (c *clusterT) waitLeader(t *testing.T, want *clusterNode) {
	t.Helper()
	poll.Until(t, clusterWaitTimeout, "a leader", func() bool {
		c.leader = nil
		for _, n := range c.running() {
			if n.raft.State() == raft.Leader && (want == nil || n == want) {
				c.leader = n
			}
		}
		return c.leader != nil
	})
	// The leader's first entry of its term commits before it serves.
	if err := c.leader.raft.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatalf("barrier on new leader %s: %v", c.leader.id, err)
	}
	t.Logf("leader: %s", c.leader.id)
}

// leaderFirst returns the running nodes, the leader first.
func (c *clusterT) leaderFirst() []*clusterNode {
	out := []*clusterNode{c.leader}
	for _, n := range c.running() {
		if n != c.leader {
			out = append(out, n)
		}
	}
	return out
}

// follower returns a running node that is not the leader.
func (c *clusterT) follower(t *testing.T) *clusterNode {
	t.Helper()
	for _, n := range c.running() {
		if n != c.leader {
			return n
		}
	}
	t.Fatal("no follower")
	return nil
}

// waitApplied waits until every node in nodes has applied as far as the
// leader, which must have applied everything it was sent.
func (c *clusterT) waitApplied(t *testing.T, nodes ...*clusterNode) {
	t.Helper()
	want := c.leader.fsm.Applied()
	var state []string
	done := false
	defer func() { // where each node was, when the wait below failed
		if !done {
			t.Logf("applied: %s", strings.Join(state, ", "))
		}
	}()
	poll.Until(t, clusterWaitTimeout, fmt.Sprintf("every node to apply index %d", want), func() bool {
		state = state[:0]
		ok := true
		for _, n := range nodes {
			state = append(state, fmt.Sprintf("%s at %d", n.id, n.fsm.Applied()))
			ok = ok && n.fsm.Applied() == want
		}
		return ok
	})
	done = true
}

// apply runs cmd through Raft on node n and returns the FSM's response.
func (c *clusterT) apply(t *testing.T, n *clusterNode, cmd interface{ Encode() []byte }) any {
	t.Helper()
	f := n.raft.Apply(cmd.Encode(), 10*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("apply %T on %s: %v", cmd, n.id, err)
	}
	return f.Response()
}

func clusterAsError(v any) error {
	err, _ := v.(error)
	return err
}

// clusterMessage returns message number i; its content follows from i.
func clusterMessage(i int, now int64) *message.Message {
	return &message.Message{
		ID:         clusterID(i),
		Subject:    clusterSubject(i),
		CreatedAt:  now - 5,
		Tags:       []string{fmt.Sprintf("tag%d", i%4)},
		Properties: []message.Property{{Key: "n", Value: strconv.Itoa(i)}},
		Body:       clusterBody(i),
	}
}

func clusterID(i int) string { return fmt.Sprintf("m-%05d", i) }

func clusterBody(i int) []byte {
	b := make([]byte, 200+(i*37)%800)
	x := uint32(i)*2654435761 + 1
	for j := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[j] = byte(x)
	}
	return b
}

// send appends count new messages through node n in batches and checks
// that each was appended at the next sequence of its subject.
func (c *clusterT) send(t *testing.T, n *clusterNode, count, batch int) {
	t.Helper()
	m := &c.model
	for sent := 0; sent < count; {
		k := min(batch, count-sent)
		now := c.now()
		cmd := &Append{Now: now}
		for i := range k {
			cmd.Messages = append(cmd.Messages, clusterMessage(m.next+i, now))
		}
		res, ok := c.apply(t, n, cmd).(*AppendResult)
		if !ok || len(res.Messages) != k {
			t.Fatalf("append of %d messages: response %#v", k, res)
		}
		last := int64(-1)
		for i, r := range res.Messages {
			msg := cmd.Messages[i]
			want := int64(len(m.ids[msg.Subject]))
			if r.Status != Appended || r.Seq != want || r.Offset <= last || r.Err != nil {
				t.Fatalf("append %s: %+v, want appended at seq %d after offset %d", msg.ID, r, want, last)
			}
			last = r.Offset
			m.ids[msg.Subject] = append(m.ids[msg.Subject], msg.ID)
			m.offsets[msg.ID] = r.Offset
		}
		m.next += k
		sent += k
	}
}

// sendDuplicates sends messages numbered nums again, plus one new message,
// and checks that the old ids come back as duplicates of their first copy.
func (c *clusterT) sendDuplicates(t *testing.T, n *clusterNode, nums ...int) {
	t.Helper()
	m := &c.model
	now := c.now()
	cmd := &Append{Now: now}
	for _, i := range nums {
		cmd.Messages = append(cmd.Messages, clusterMessage(i, now))
	}
	fresh := clusterMessage(m.next, now)
	cmd.Messages = append(cmd.Messages, fresh)
	res, ok := c.apply(t, n, cmd).(*AppendResult)
	if !ok || len(res.Messages) != len(cmd.Messages) {
		t.Fatalf("append: response %#v", res)
	}
	for i, num := range nums {
		r := res.Messages[i]
		if r.Status != Duplicate || r.Offset != m.offsets[clusterID(num)] || r.Seq != -1 {
			t.Fatalf("resend of %s: %+v, want a duplicate of offset %d", clusterID(num), r, m.offsets[clusterID(num)])
		}
	}
	r := res.Messages[len(nums)]
	if want := int64(len(m.ids[fresh.Subject])); r.Status != Appended || r.Seq != want {
		t.Fatalf("new message %s in a batch of duplicates: %+v, want appended at seq %d", fresh.ID, r, want)
	}
	m.ids[fresh.Subject] = append(m.ids[fresh.Subject], fresh.ID)
	m.offsets[fresh.ID] = r.Offset
	m.next++
}

// pull pulls through node n and checks the entries against the model.
func (c *clusterT) pull(t *testing.T, n *clusterNode, subject, group, consumer string, max int) []Pulled {
	t.Helper()
	want := c.model.pull(subject, group, consumer, max, DefaultConfig("").MaxPull, DefaultConfig("").MaxUnacked)
	res, ok := c.apply(t, n, &Pull{Start: StartEarliest, Now: c.now(), Subject: subject, ConsumerGroup: group, Consumer: consumer, Max: max}).(*PullResult)
	if !ok {
		t.Fatalf("pull %s/%s/%s: response %#v", subject, group, consumer, res)
	}
	if !slices.Equal(res.Entries, want) {
		t.Fatalf("pull %s/%s/%s of %d:\n got %v\nwant %v", subject, group, consumer, max, res.Entries, want)
	}
	for _, p := range res.Entries {
		msg, err := n.fsm.Message(subject, p.ConsumeSeq)
		if err != nil || msg.ID != c.model.ids[subject][p.ConsumeSeq] {
			t.Fatalf("message %s/%d pulled by %s: %v, %v", subject, p.ConsumeSeq, consumer, msg, err)
		}
	}
	return res.Entries
}

// ack acks ranges through node n and checks the ack position.
func (c *clusterT) ack(t *testing.T, n *clusterNode, subject, group, consumer string, wantPos int64, ranges ...message.AckRange) {
	t.Helper()
	pos, ok := c.model.ack(subject, group, consumer, ranges)
	if !ok || pos != wantPos {
		t.Fatalf("test script: model refuses ack %v of %s/%s/%s or puts it at %d, not %d", ranges, subject, group, consumer, pos, wantPos)
	}
	res, ok := c.apply(t, n, &Ack{Now: c.now(), Subject: subject, ConsumerGroup: group, Consumer: consumer, Ranges: ranges}).(*AckResult)
	if !ok || res.AckPos != wantPos {
		t.Fatalf("ack %v of %s/%s/%s: response %#v, want ack position %d", ranges, subject, group, consumer, res, wantPos)
	}
}

// ackInvalid checks that an ack is refused and changes nothing.
func (c *clusterT) ackInvalid(t *testing.T, n *clusterNode, subject, group, consumer string, ranges ...message.AckRange) {
	t.Helper()
	if _, ok := c.model.ack(subject, group, consumer, ranges); ok {
		t.Fatalf("test script: model accepts ack %v of %s/%s/%s", ranges, subject, group, consumer)
	}
	res := c.apply(t, n, &Ack{Now: c.now(), Subject: subject, ConsumerGroup: group, Consumer: consumer, Ranges: ranges})
	if !errors.Is(clusterAsError(res), ErrInvalid) {
		t.Fatalf("ack %v of %s/%s/%s: response %#v, want ErrInvalid", ranges, subject, group, consumer, res)
	}
}

// reclaim reclaims through node n and returns how many entries went back.
func (c *clusterT) reclaim(t *testing.T, n *clusterNode, subject, group, consumer string) int {
	t.Helper()
	want := c.model.reclaim(subject, group, consumer)
	res, ok := c.apply(t, n, &Reclaim{Now: c.now(), Subject: subject, ConsumerGroup: group, Consumer: consumer}).(*ReclaimResult)
	if !ok || res.Reclaimed != want {
		t.Fatalf("reclaim %s/%s/%s: response %#v, want %d reclaimed", subject, group, consumer, res, want)
	}
	return res.Reclaimed
}

// consumerGroups runs every consumer-group command through node n on group
// g of orders (which the model does not follow): settings, nacks whose
// retries go through the schedule and are fired, extends, an ack timeout,
// dead letters resent and purged, a reset, tag-filtered and at-most-once
// pulls. It checks the answers that follow from the script alone.
func (c *clusterT) consumerGroups(t *testing.T, n *clusterNode, g string) {
	t.Helper()
	res := c.apply(t, n, &SetConsumerGroup{Now: c.now(), Subject: "orders", ConsumerGroup: g, Set: SetMaxDeliveries | SetAckWait,
		Settings: ConsumerGroupSettings{MaxDeliveries: 2, AckWait: 1000}, Start: StartEarliest})
	if r, ok := res.(*ConsumerGroupResult); !ok || !r.Created {
		t.Fatalf("set-group: %#v", res)
	}
	pull := func(max int) []Pulled {
		t.Helper()
		r, ok := c.apply(t, n, &Pull{Now: c.now(), Subject: "orders", ConsumerGroup: g, Consumer: "c1", Max: max, Resend: true, From: -1}).(*PullResult)
		if !ok {
			t.Fatalf("pull %s: %#v", g, r)
		}
		return r.Entries
	}
	first := pull(10)
	if len(first) != 10 || first[0].Deliveries != 1 {
		t.Fatalf("first pull of %s: %v", g, first)
	}
	due := c.clock + 100
	nack := func(retryAt int64, r message.AckRange) *NackResult {
		t.Helper()
		res, ok := c.apply(t, n, &Nack{Now: c.now(), Subject: "orders", ConsumerGroup: g, Consumer: "c1", RetryAt: retryAt, Ranges: []message.AckRange{r}}).(*NackResult)
		if !ok {
			t.Fatalf("nack %v: %#v", r, res)
		}
		return res
	}
	if r := nack(due, message.AckRange{First: 0, Last: 3}); r.Retried != 4 {
		t.Fatalf("nack of 4: %+v", r)
	}
	nack(0, message.AckRange{First: 4, Last: 5}) // the group's backoff: 5 s, not due in this script
	if r, ok := c.apply(t, n, &Extend{Now: c.now(), Subject: "orders", ConsumerGroup: g, Consumer: "c1", Ranges: []message.AckRange{{First: 6, Last: 7}}}).(*ExtendResult); !ok || r.Extended != 2 {
		t.Fatalf("extend: %#v", r)
	}
	c.clock += 2000 // past every ack wait
	if r, ok := c.apply(t, n, &Expire{Now: c.now(), Subject: "orders", ConsumerGroup: g, Consumer: "c1", Ranges: []message.AckRange{{First: 6, Last: 9}}}).(*ExpireResult); !ok || r.Expired != 4 {
		t.Fatalf("expire: %#v", r)
	}
	var refs []uint64
	for _, hour := range n.fsm.PendingHours() {
		n.fsm.LoadSchedule(hour, func(e delaywheel.Entry) error {
			if e.At <= due {
				refs = append(refs, e.Ref)
			}
			return nil
		})
	}
	if r, ok := c.apply(t, n, &Fire{Now: c.now(), Refs: refs}).(*FireResult); !ok || r.Fired != 4 {
		t.Fatalf("fire of %d retries: %#v", len(refs), r)
	}
	again := pull(8)
	if len(again) != 8 { // the 4 that timed out, then the 4 retried
		t.Fatalf("pull after retries and a timeout: %v", again)
	}
	for _, p := range again {
		if p.Deliveries != 2 {
			t.Fatalf("redelivered entry %+v: want its second delivery", p)
		}
	}
	if r := nack(0, message.AckRange{First: again[0].PullSeq, Last: again[len(again)-1].PullSeq}); r.Dead != 8 {
		t.Fatalf("nack at the most deliveries: %+v", r)
	}
	if r, ok := c.apply(t, n, &DeadLetters{Now: c.now(), Subject: "orders", ConsumerGroup: g, Op: DeadResend, Seqs: []int64{again[0].ConsumeSeq}}).(*DeadLettersResult); !ok || r.Done != 1 {
		t.Fatalf("resend: %#v", r)
	}
	if r, ok := c.apply(t, n, &DeadLetters{Now: c.now(), Subject: "orders", ConsumerGroup: g, Op: DeadPurge, All: true}).(*DeadLettersResult); !ok || r.Done != 7 {
		t.Fatalf("purge: %#v", r)
	}
	c.apply(t, n, &ResetConsumerGroup{Now: c.now(), Subject: "orders", ConsumerGroup: g, To: StartLatest})
	tagged, ok := c.apply(t, n, &Pull{Now: c.now(), Subject: "orders", ConsumerGroup: g + "-tags", Consumer: "c1", Max: 20, Tags: []string{"tag1"},
		Start: StartEarliest}).(*PullResult)
	if !ok || len(tagged.Entries) != 20 {
		t.Fatalf("tag-filtered pull: %#v", tagged)
	}
	for _, p := range tagged.Entries {
		if m, err := n.fsm.Message("orders", p.ConsumeSeq); err != nil || m.Tags[0] != "tag1" {
			t.Fatalf("tag-filtered pull handed %s/%d: %v, %v", "orders", p.ConsumeSeq, m, err)
		}
	}
	if r, ok := c.apply(t, n, &Pull{Now: c.now(), Subject: "orders", ConsumerGroup: g + "-once", Consumer: "c1", Max: 5, AtMostOnce: true,
		Start: StartEarliest}).(*PullResult); !ok || len(r.Entries) != 5 {
		t.Fatalf("at-most-once pull: %#v", r)
	}
	if r, ok := c.apply(t, n, &Reclaim{Now: c.now(), Subject: "orders", ConsumerGroup: g + "-once", Consumer: "c1"}).(*ReclaimResult); !ok || r.Reclaimed != 0 {
		t.Fatalf("reclaim of an at-most-once consumer: %#v", r)
	}
}

// checkMessages reads every message node n holds and checks it against
// what was sent.
func (c *clusterT) checkMessages(t *testing.T, n *clusterNode) {
	t.Helper()
	for _, subject := range clusterSubjects {
		ids := c.model.ids[subject]
		for seq, id := range ids {
			msg, err := n.fsm.Message(subject, int64(seq))
			if err != nil {
				t.Fatalf("%s: message %s/%d: %v", n.id, subject, seq, err)
			}
			num, _ := strconv.Atoi(strings.TrimPrefix(id, "m-"))
			if msg.ID != id || msg.Subject != subject || !bytes.Equal(msg.Body, clusterBody(num)) ||
				msg.Index == 0 || msg.AppendedAt == 0 || len(msg.Properties) != 1 || msg.Properties[0].Value != strconv.Itoa(num) {
				t.Fatalf("%s: message %s/%d: id %s index %d, want %s with its body", n.id, subject, seq, msg.ID, msg.Index, id)
			}
		}
		if _, err := n.fsm.Message(subject, int64(len(ids))); !errors.Is(err, logs.ErrBeyondEnd) {
			t.Fatalf("%s: message %s/%d past the end: %v", n.id, subject, len(ids), err)
		}
	}
}

// checkReplicas requires nodes, which have applied the same index, to hold
// the same messages, the same log ends and byte-identical log files.
func (c *clusterT) checkReplicas(t *testing.T, nodes []*clusterNode) {
	t.Helper()
	ref := nodes[0]
	refEnds := ref.fsm.Ends()
	refFiles := clusterDataFiles(t, ref)
	if len(refFiles) < 5 {
		t.Fatalf("%s holds only %d log files", ref.id, len(refFiles))
	}
	for _, n := range nodes[1:] {
		if ends := n.fsm.Ends(); !reflect.DeepEqual(ends, refEnds) {
			t.Fatalf("log ends differ:\n%s: %+v\n%s: %+v", ref.id, refEnds, n.id, ends)
		}
		for _, subject := range clusterSubjects {
			for seq := range c.model.ids[subject] {
				a, errA := ref.fsm.Message(subject, int64(seq))
				b, errB := n.fsm.Message(subject, int64(seq))
				if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
					t.Fatalf("message %s/%d differs: %s has %+v (%v), %s has %+v (%v)", subject, seq, ref.id, a, errA, n.id, b, errB)
				}
			}
		}
		if a, b := stateBytes(ref.fsm), stateBytes(n.fsm); !bytes.Equal(a, b) {
			t.Fatalf("replicated state differs between %s and %s", ref.id, n.id)
		}
		if a, b := storedBytes(t, ref.fsm), storedBytes(t, n.fsm); !maps.Equal(a, b) {
			t.Fatalf("bytes stored per subject differ: %s %v, %s %v", ref.id, a, n.id, b)
		}
		files := clusterDataFiles(t, n)
		if a, b := slices.Sorted(maps.Keys(refFiles)), slices.Sorted(maps.Keys(files)); !slices.Equal(a, b) {
			t.Fatalf("log files differ:\n%s: %v\n%s: %v", ref.id, a, n.id, b)
		}
		for name, want := range refFiles {
			if got := files[name]; !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("%s differs between %s (%d bytes) and %s (%d bytes) from byte %d", name, ref.id, len(want), n.id, len(got), i)
			}
		}
	}
	t.Logf("%d replicas agree: applied %d, %d log files, message log ends at %d",
		len(nodes), refEnds.Applied, len(refFiles), refEnds.Messages)
}

// clusterDataFiles reads every log segment of node n's FSM, by path
// relative to its data directory; the checkpoint is not a log and differs
// between nodes that snapshotted at different times.
func clusterDataFiles(t *testing.T, n *clusterNode) map[string][]byte {
	t.Helper()
	root := filepath.Join(n.dir, "fsm", dataDir)
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), checkpointFile) {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatalf("%s: read log files: %v", n.id, err)
	}
	return files
}

// clusterModel is what the FSM must answer: messages by subject, and
// groups' and consumers' pull state, updated as commands are sent.
type clusterModel struct {
	next      int                 // number of the next new message
	ids       map[string][]string // subject → message ids by consume sequence
	offsets   map[string]int64    // message id → message-log offset
	groups    map[[2]string]*clusterGroup
	consumers map[[3]string]*clusterConsumer
}

type clusterGroup struct {
	cursor    int64
	redeliver []clusterPulled
}

type clusterConsumer struct {
	next, ackPos int64
	window       []clusterPulled // pull sequences ackPos..next-1
}

type clusterPulled struct {
	consumeSeq int64
	acked      bool
	deliveries uint32
}

func (m *clusterModel) group(subject, group string) *clusterGroup {
	k := [2]string{subject, group}
	if m.groups[k] == nil {
		m.groups[k] = &clusterGroup{}
	}
	return m.groups[k]
}

func (m *clusterModel) pull(subject, group, consumer string, max, maxPull, maxUnacked int) []Pulled {
	g := m.group(subject, group)
	k := [3]string{subject, group, consumer}
	cs := m.consumers[k]
	if cs == nil {
		cs = &clusterConsumer{}
		m.consumers[k] = cs
	}
	n := min(max, maxPull, maxUnacked-len(cs.window))
	end := int64(len(m.ids[subject]))
	var out []Pulled
	if end == 0 || n <= 0 {
		return out
	}
	hand := func(seq int64, deliveries uint32) {
		out = append(out, Pulled{PullSeq: cs.next, ConsumeSeq: seq, Deliveries: deliveries + 1})
		cs.window = append(cs.window, clusterPulled{consumeSeq: seq, deliveries: deliveries + 1})
		cs.next++
	}
	for len(out) < n && len(g.redeliver) > 0 {
		hand(g.redeliver[0].consumeSeq, g.redeliver[0].deliveries)
		g.redeliver = g.redeliver[1:]
	}
	for ; len(out) < n && g.cursor < end; g.cursor++ {
		hand(g.cursor, 0)
	}
	return out
}

func (m *clusterModel) ack(subject, group, consumer string, ranges []message.AckRange) (int64, bool) {
	cs := m.consumers[[3]string{subject, group, consumer}]
	if cs == nil {
		return 0, false
	}
	for _, r := range ranges {
		if r.First < 0 || r.Last < r.First || r.Last >= cs.next {
			return 0, false
		}
	}
	for _, r := range ranges {
		for seq := max(r.First, cs.ackPos); seq <= r.Last; seq++ {
			cs.window[seq-cs.ackPos].acked = true
		}
	}
	for len(cs.window) > 0 && cs.window[0].acked {
		cs.window = cs.window[1:]
		cs.ackPos++
	}
	return cs.ackPos, true
}

func (m *clusterModel) reclaim(subject, group, consumer string) int {
	cs := m.consumers[[3]string{subject, group, consumer}]
	if cs == nil {
		return 0
	}
	g := m.group(subject, group)
	n := 0
	for _, p := range cs.window {
		if !p.acked {
			g.redeliver = append(g.redeliver, p)
			n++
		}
	}
	cs.window = nil
	cs.ackPos = cs.next
	return n
}
