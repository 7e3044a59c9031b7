package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

// differentFlags gives each node of a group its own values of every
// setting apply decides with: retention, the dedup window, the pull and
// unacked bounds and the segment sizes. Snapshots are left to the test.
func differentFlags(id string, c *Config) {
	c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
	f := &c.FSM
	switch id {
	case "n1":
		f.SegmentSize, f.IndexSegmentSize = 1<<20, 64<<10
		f.Retention = logs.Retention{MaxBytes: 3 << 20}
		f.DedupWindow, f.MaxPull, f.MaxUnacked = 10*time.Minute, 7, 30
	case "n2":
		f.SegmentSize, f.IndexSegmentSize = 2<<20, 128<<10
		f.Retention = logs.Retention{MaxBytes: 5 << 20}
		f.DedupWindow, f.MaxPull, f.MaxUnacked = 2*time.Minute, 3, 12
	default:
		f.SegmentSize, f.IndexSegmentSize = 4<<20, 256<<10
		f.Retention = logs.Retention{MaxAge: time.Hour.Milliseconds()}
		f.DedupWindow, f.MaxPull, f.MaxUnacked = 5*time.Minute, 50, 100
	}
}

// pullOnce pulls up to max messages of subject s for group g's consumer c
// and acks the first ack of them; it returns how many it got.
func pullOnce(t *testing.T, gc *transport.LeaderClient, g string, max, ack int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &transport.PullRequest{Subject: "s", ConsumerGroup: g, Consumer: "c", Max: max, Wait: 50 * time.Millisecond, Start: transport.StartEarliest}
	body, err := gc.Call(ctx, transport.TypePull, req.Encode())
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	resp, err := transport.DecodePullResponse(body)
	if err != nil {
		t.Fatal(err)
	}
	if ack = min(ack, len(resp.Messages)); ack > 0 {
		r := &transport.AckRequest{Subject: "s", ConsumerGroup: g, Consumer: "c", Epoch: resp.Epoch,
			Ranges: []message.AckRange{{First: resp.Messages[0].PullSeq, Last: resp.Messages[ack-1].PullSeq}}}
		if _, err := gc.Call(ctx, transport.TypeAck, r.Encode()); err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	return len(resp.Messages)
}

// replicaFiles reads a node's state-machine logs, every file under
// DATA/fsm/data but the checkpoint (written when each node snapshots), by
// relative path.
func replicaFiles(t *testing.T, n *Node) map[string][]byte {
	t.Helper()
	root := filepath.Join(n.cfg.DataDir, "fsm", "data")
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		// A key index's sidecar being written (X.idx.tmp) is left out.
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), "checkpoint") || strings.HasSuffix(d.Name(), ".tmp") {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(root, path)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", n.cfg.ID, err)
	}
	return out
}

// replicaView is what sameReplicas compares of one node, read while its
// applied index stayed put.
type replicaView struct {
	applied uint64
	ends    any
	files   map[string][]byte
	groups  []byte
}

// sameReplicas waits until every node shows a view read at one applied
// index (the leader may apply a command of its own, an expiry or a
// retention step, between two reads, so a view whose index moved while it
// was read, or that differs from the others' index, is read again), then
// requires byte-identical logs and the same consumer groups and log ends.
func sameReplicas(t *testing.T, nodes []*Node) {
	t.Helper()
	var views []replicaView
	waitFor(t, 10*time.Second, "every replica to show the same applied index", func() bool {
		views = views[:0]
		for _, n := range nodes {
			before := n.fsm.Applied()
			v := replicaView{applied: before, ends: n.fsm.Ends(), files: replicaFiles(t, n)}
			v.groups, _ = json.Marshal(n.fsm.ConsumerGroups())
			if n.fsm.Applied() != before || before != nodes[0].fsm.Applied() {
				return false
			}
			views = append(views, v)
		}
		for _, v := range views[1:] {
			if v.applied != views[0].applied {
				return false
			}
		}
		return true
	})
	ref := views[0]
	for i, v := range views[1:] {
		a, b := nodes[0].cfg.ID, nodes[i+1].cfg.ID
		if !reflect.DeepEqual(ref.ends, v.ends) {
			t.Fatalf("log ends differ at index %d: %s %+v, %s %+v", ref.applied, a, ref.ends, b, v.ends)
		}
		if x, y := slices.Sorted(maps.Keys(ref.files)), slices.Sorted(maps.Keys(v.files)); !slices.Equal(x, y) {
			t.Fatalf("log files differ:\n%s: %v\n%s: %v", a, x, b, y)
		}
		for name, want := range ref.files {
			if !bytes.Equal(v.files[name], want) {
				t.Fatalf("%s differs between %s (%d bytes) and %s (%d bytes)", name, a, len(want), b, len(v.files[name]))
			}
		}
		if !bytes.Equal(v.groups, ref.groups) {
			t.Fatalf("consumer groups differ:\n%s: %s\n%s: %s", a, ref.groups, b, v.groups)
		}
	}
}

// TestNodesWithDifferentFlagsHoldTheSameReplica starts the three nodes of
// a group each with its own retention, dedup window, pull and unacked
// bounds and segment sizes, and drives sends, pulls, acks, retention,
// snapshots, a restart and a leader change through them: the replicas
// stay byte-identical, since apply goes by the group's configuration, not
// by each node's flags.
func TestNodesWithDifferentFlagsHoldTheSameReplica(t *testing.T) {
	nodes := startGroup(t, differentFlags)
	gc := clientOf(t, clientAddrs(nodes)...)
	send := func(first, last int) {
		for i := first; i < last; i++ {
			sendRaw(t, gc, testmsg.OfSize(fmt.Sprint("m", i), "s", 0, 256<<10))
		}
	}
	send(0, 10)
	pullOnce(t, gc, "a", 40, 2)
	pullOnce(t, gc, "b", 40, 40)
	send(10, 30) // past every node's retention size and several segments of each
	pullOnce(t, gc, "a", 40, 5)
	pullOnce(t, gc, "c", 40, 1)
	sameReplicas(t, nodes)

	for _, n := range nodes {
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("%s: snapshot: %v", n.cfg.ID, err)
		}
	}
	n3 := nodes[2]
	if err := n3.Close(); err != nil {
		t.Fatal(err)
	}
	send(30, 40)
	pullOnce(t, gc, "b", 40, 3)
	nodes[2] = restart(t, n3)
	send(40, 45)
	sameReplicas(t, nodes)

	// Another leader, with other flags, changes nothing either.
	old := leaderOf(nodes)
	to := nodes[1]
	if old == to {
		to = nodes[0]
	}
	if err := old.Raft().LeadershipTransferToServer(raft.ServerID(to.cfg.ID), raft.ServerAddress(to.cfg.RaftAddr)).Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	waitLeader(t, to)
	send(45, 55)
	pullOnce(t, gc, "a", 40, 40)
	pullOnce(t, gc, "d", 40, 0)
	sameReplicas(t, nodes)

	// Every node applied by the first leader's values, and its whole
	// state, checkpointed at the same index, is the same.
	var checkpoints [][]byte
	for _, n := range nodes {
		if got, want := n.fsm.BrokerConfig(), nodes[0].cfg.FSM.BrokerConfig(); got.Source != fsm.ConfigGroup || got.BrokerConfig != want {
			t.Fatalf("%s applies by %+v, want n1's %+v", n.cfg.ID, got, want)
		}
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatalf("%s: snapshot: %v", n.cfg.ID, err)
		}
		b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, "fsm", "data", "checkpoint"))
		if err != nil {
			t.Fatal(err)
		}
		checkpoints = append(checkpoints, b)
	}
	for i, b := range checkpoints[1:] {
		if !bytes.Equal(b, checkpoints[0]) {
			t.Fatalf("the checkpoints of %s and %s differ", nodes[0].cfg.ID, nodes[i+1].cfg.ID)
		}
	}
}

// httpStatus reads node n's /status page.
func httpStatus(t *testing.T, n *Node) transport.Status {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st transport.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSetBrokerConfigReachesEveryReplica changes settings through the
// admin API (what qmqctl config set calls): every node applies them at
// the same entry and shows them in /status; changes at, under and over
// each bound are accepted or refused by the leader, and a refusal
// proposes nothing and changes nothing on any node.
func TestSetBrokerConfigReachesEveryReplica(t *testing.T) {
	nodes := startGroup(t, differentFlags)
	adm, err := admin.New(nodes[1].ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seed := nodes[0].cfg.FSM.BrokerConfig()
	for _, n := range nodes {
		st := httpStatus(t, n)
		if c := st.BrokerConfig; c == nil || c.Source != "broker-group" || c.MaxPull != seed.MaxPull || c.SegmentSize != seed.SegmentSize {
			t.Fatalf("%s: /status shows %+v, want n1's values, the group's", n.cfg.ID, st.BrokerConfig)
		}
	}
	d := func(v time.Duration) *time.Duration { return &v }
	i := func(v int) *int { return &v }
	b := func(v int64) *int64 { return &v }
	got, err := adm.SetBrokerGroupConfig(ctx, "g1", admin.BrokerGroupConfigChanges{MaxPull: i(250), DedupWindow: d(3 * time.Minute), SegmentSize: b(2 << 20)})
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.MaxPull != 250 || got.Config.DedupWindow != 3*time.Minute || got.Config.SegmentSize != 2<<20 || got.Config.MaxUnacked != seed.MaxUnacked {
		t.Fatalf("set answered %+v", got.Config)
	}
	waitFor(t, 10*time.Second, "every replica to apply the change", func() bool {
		for _, n := range nodes {
			if n.fsm.BrokerConfig().Index != got.Config.Index {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if st := httpStatus(t, n); *st.BrokerConfig != got.Config {
			t.Fatalf("%s: /status shows %+v, want %+v", n.cfg.ID, *st.BrokerConfig, got.Config)
		}
	}
	all, err := adm.BrokerGroupConfigs(ctx, "g1")
	if err != nil || len(all) != 3 {
		t.Fatalf("configs of every node: %v, %v", all, err)
	}
	for _, c := range all {
		if c.Config != got.Config {
			t.Fatalf("%s answers %+v, want %+v", c.Node, c.Config, got.Config)
		}
	}

	// At, under and over each bound: what the leader accepts it proposes;
	// what it refuses it does not.
	for _, tc := range []struct {
		name string
		ch   admin.BrokerGroupConfigChanges
		ok   bool
	}{
		{"max-pull at its bound", admin.BrokerGroupConfigChanges{MaxPull: i(limits.MaxMaxPull)}, true},
		{"max-pull over", admin.BrokerGroupConfigChanges{MaxPull: i(limits.MaxMaxPull + 1)}, false},
		{"max-pull at 1", admin.BrokerGroupConfigChanges{MaxPull: i(1)}, true},
		{"max-pull under", admin.BrokerGroupConfigChanges{MaxPull: i(0)}, false},
		{"max-unacked at its bound", admin.BrokerGroupConfigChanges{MaxUnacked: i(limits.MaxMaxUnacked)}, true},
		{"max-unacked over", admin.BrokerGroupConfigChanges{MaxUnacked: i(limits.MaxMaxUnacked + 1)}, false},
		{"max-unacked under", admin.BrokerGroupConfigChanges{MaxUnacked: i(0)}, false},
		{"dedup-window at its bound", admin.BrokerGroupConfigChanges{DedupWindow: d(limits.MaxDedupWindow)}, true},
		{"dedup-window over", admin.BrokerGroupConfigChanges{DedupWindow: d(limits.MaxDedupWindow + time.Millisecond)}, false},
		{"dedup-window negative", admin.BrokerGroupConfigChanges{DedupWindow: d(-time.Millisecond)}, false},
		{"dedup-window of a fraction of a millisecond", admin.BrokerGroupConfigChanges{DedupWindow: d(1500 * time.Microsecond)}, false},
		{"dedup-window past the retention age", admin.BrokerGroupConfigChanges{RetentionAge: d(time.Hour), DedupWindow: d(limits.MaxDedupWindow)}, true},
		{"retention-age at the dedup window", admin.BrokerGroupConfigChanges{RetentionAge: d(limits.MaxDedupWindow)}, true},
		{"retention-age under it", admin.BrokerGroupConfigChanges{RetentionAge: d(limits.MaxDedupWindow - time.Millisecond)}, false},
		{"retention-age at its bound", admin.BrokerGroupConfigChanges{RetentionAge: d(limits.MaxRetentionAge)}, true},
		{"retention-age over", admin.BrokerGroupConfigChanges{RetentionAge: d(limits.MaxRetentionAge + time.Millisecond)}, false},
		{"segment-size at its bound", admin.BrokerGroupConfigChanges{SegmentSize: b(limits.MinSegmentSize)}, true},
		{"segment-size under", admin.BrokerGroupConfigChanges{SegmentSize: b(limits.MinSegmentSize - 1)}, false},
		{"segment-size over", admin.BrokerGroupConfigChanges{SegmentSize: b(limits.MaxSegmentSize + 1)}, false},
		{"segment-size past the retention size", admin.BrokerGroupConfigChanges{SegmentSize: b(4 << 20)}, false},
		{"retention-size at a segment", admin.BrokerGroupConfigChanges{RetentionBytes: b(limits.MinSegmentSize)}, true},
		{"retention-size under", admin.BrokerGroupConfigChanges{RetentionBytes: b(limits.MinSegmentSize - 1)}, false},
		{"retention-size over", admin.BrokerGroupConfigChanges{RetentionBytes: b(limits.MaxRetentionBytes + 1)}, false},
		{"index-segment-size at its bounds", admin.BrokerGroupConfigChanges{IndexSegmentSize: b(limits.MaxIndexSegmentSize)}, true},
		{"index-segment-size under", admin.BrokerGroupConfigChanges{IndexSegmentSize: b(limits.MinIndexSegmentSize - 1)}, false},
		{"index-segment-size over", admin.BrokerGroupConfigChanges{IndexSegmentSize: b(limits.MaxIndexSegmentSize + 1)}, false},
		{"nothing", admin.BrokerGroupConfigChanges{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader := leaderOf(nodes)
			before := leader.fsm.BrokerConfig()
			waitFor(t, 10*time.Second, "every replica to apply the last change", func() bool {
				for _, n := range nodes {
					if n.fsm.BrokerConfig() != before {
						return false
					}
				}
				return true
			})
			index := leader.raft.LastIndex()
			got, err := adm.SetBrokerGroupConfig(ctx, "g1", tc.ch)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.Config.Index <= before.Index {
					t.Fatalf("accepted at entry %d, after %d", got.Config.Index, before.Index)
				}
				return
			}
			if transport.CodeOf(err) != transport.Invalid {
				t.Fatalf("answered %+v, %v; want INVALID", got, err)
			}
			if leader.raft.LastIndex() != index {
				t.Fatalf("a refused change was proposed: the log went from %d to %d", index, leader.raft.LastIndex())
			}
			for _, n := range nodes {
				if n.fsm.BrokerConfig() != before {
					t.Fatalf("%s: the configuration changed to %+v", n.cfg.ID, n.fsm.BrokerConfig())
				}
			}
		})
	}
}

// A voter that answers as a node of an earlier release (UNKNOWN_TYPE to a
// broker-config request) holds a change back: the command would stop it.
// A joining node of an earlier release is refused.
func TestBrokerConfigWaitsForVotersOfAnEarlierRelease(t *testing.T) {
	nodes := startGroup(t)
	leader := leaderOf(nodes)
	oldRaft := freeAddr(t)
	old := oldReleaseNode(t, nodes[2], oldRaft)
	// The leader now reaches n3 at the old release's address.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := leader.propose(ctx, (&fsm.SetMember{ID: "n3", ClientAddr: old}).Encode()); err != nil {
		t.Fatal(err)
	}
	if err := leader.votersKnowBrokerConfig(ctx); !errors.Is(err, errEarlierVoter) || !strings.Contains(err.Error(), "n3") {
		t.Fatalf("the voters' check: %v, want one naming n3 of an earlier release", err)
	}
	adm, err := admin.New(leader.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	before, index := leader.fsm.BrokerConfig(), leader.raft.LastIndex()
	pull := 5
	if _, err := adm.SetBrokerGroupConfig(ctx, "g1", admin.BrokerGroupConfigChanges{MaxPull: &pull}); transport.CodeOf(err) != transport.Invalid ||
		!strings.Contains(err.Error(), "earlier release") {
		t.Fatalf("a change with an old voter: %v, want INVALID naming it", err)
	}
	if leader.fsm.BrokerConfig() != before || leader.raft.LastIndex() != index {
		t.Fatal("the refused change was proposed")
	}
	if err := adm.Join(ctx, "g1", "n4", oldRaft, old); err == nil || !strings.Contains(err.Error(), "earlier release") {
		t.Fatalf("joining a node of an earlier release: %v", err)
	}
}

// oldReleaseNode serves, in place of node like, what a node of a release
// without the broker group configuration answers: a status without it,
// and UNKNOWN_TYPE to a broker-config request, as node n4 at Raft address
// raftAddr. It returns its client address.
func oldReleaseNode(t *testing.T, like *Node, raftAddr string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &transport.Server{Handler: func(ctx context.Context, typ transport.Type, p []byte) ([]byte, error) {
		if typ == transport.TypeStatus {
			st := like.Status()
			st.ID, st.RaftAddr, st.BrokerConfig = "n4", raftAddr, nil
			return json.Marshal(st)
		}
		return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(typ))
	}}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}
