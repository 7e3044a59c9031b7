package server

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/server/raftlog"
)

// waitIdentity waits until n's state machine and raft store hold the
// group's identity, and returns it.
func waitIdentity(t *testing.T, n *Node) string {
	t.Helper()
	var id string
	waitFor(t, 10*time.Second, "the group identity", func() bool {
		stored, err := storedIdentity(n.store.Stable())
		id = n.fsm.Identity()
		return err == nil && id != "" && stored == id
	})
	return id
}

// Every member holds the identity the first leader recorded, in its state
// machine and in its raft store.
func TestGroupIdentityIsReplicated(t *testing.T) {
	nodes := startGroup(t)
	id := waitIdentity(t, nodes[0])
	if err := fsm.CheckIdentity(id); err != nil || fsm.IdentityBrokerGroup(id) != "g1" {
		t.Fatalf("identity %q: %v", id, err)
	}
	for _, n := range nodes[1:] {
		if got := waitIdentity(t, n); got != id {
			t.Fatalf("%s holds identity %q, the leader %q", n.cfg.ID, got, id)
		}
	}
}

// stopped starts a one-node group, sends to it, takes a snapshot and
// stops it, returning its configuration.
func stopped(t *testing.T, id string) Config {
	t.Helper()
	n := startNode(t, id, true, nil)
	waitLeader(t, n)
	waitIdentity(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 10)
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	cfg := n.cfg
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func wantHistoryRefused(t *testing.T, cfg Config, says string) {
	t.Helper()
	n, err := New(cfg)
	if err == nil {
		n.Close()
		t.Fatalf("a node started on data that does not belong together (want a refusal saying %q)", says)
	}
	if !errors.Is(err, ErrHistory) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), "qmqctl join") {
		t.Fatalf("refusal %v; want ErrHistory saying %q and what to do", err, says)
	}
}

// A node refuses to start when its state machine, its raft store and its
// configuration do not belong to one history, and says what to do.
func TestNodeRefusesDataOfAnotherHistory(t *testing.T) {
	t.Run("raft store removed", func(t *testing.T) {
		cfg := stopped(t, "n1")
		// Its snapshots stay: the log and the votes are gone all the same.
		if err := os.RemoveAll(filepath.Join(cfg.DataDir, raftlog.WALDir)); err != nil {
			t.Fatal(err)
		}
		wantHistoryRefused(t, cfg, "raft store")
	})
	t.Run("state machine of another group copied in", func(t *testing.T) {
		a, b := stopped(t, "n1"), stopped(t, "n1")
		fsmB := filepath.Join(b.DataDir, "fsm")
		if err := os.RemoveAll(fsmB); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(a.DataDir, "fsm"), fsmB).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		wantHistoryRefused(t, b, "history")
	})
	t.Run("configured for another group", func(t *testing.T) {
		cfg := stopped(t, "n1")
		cfg.BrokerGroup = "g2"
		wantHistoryRefused(t, cfg, `belongs to group "g1"`)
	})
	t.Run("state machine past its raft log", func(t *testing.T) {
		cfg := stopped(t, "n1")
		small := stopped(t, "n1") // fewer entries, another identity
		for _, dir := range []string{raftlog.WALDir, "snapshots"} {
			os.RemoveAll(filepath.Join(cfg.DataDir, dir))
			if out, err := exec.Command("cp", "-a", filepath.Join(small.DataDir, dir), filepath.Join(cfg.DataDir, dir)).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v: %s", err, out)
			}
		}
		wantHistoryRefused(t, cfg, "history")
	})
	t.Run("restart of a sound directory", func(t *testing.T) {
		cfg := stopped(t, "n1")
		n, err := New(cfg)
		if err != nil {
			t.Fatalf("restart: %v", err)
		}
		n.Close()
	})
}

// A restarted leader replays its Raft log through a state machine that
// has not applied it yet; Raft counts entries applied once they are handed
// over, before the state machine has them. The leader must see the
// identity its log holds and record none of its own, which would stop the
// replica at the second (another history).
func TestRestartedLeaderKeepsItsIdentity(t *testing.T) {
	disk := newFakeDisk()
	n := startNode(t, "n1", true, func(c *Config) {
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40 // no checkpoint: a restart replays all
		c.FSM.DiskFree = disk.probe
	})
	waitLeader(t, n)
	id := waitIdentity(t, n)
	sendAcked(t, []string{n.ClientAddr()}, "orders", 5)
	before := n.raft.LastIndex()
	cfg := n.cfg
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// The replay waits for disk space while the node is elected again.
	disk.free.Store(0)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	waitFor(t, 10*time.Second, "the restarted node to lead its term", func() bool {
		return r.raft.State() == raft.Leader && r.raft.LastIndex() >= before+2
	})
	if got := r.fsm.Applied(); got >= before {
		t.Fatalf("the state machine applied %d of %d entries while its disk had no room", got, before)
	}
	disk.free.Store(1 << 40)
	waitFor(t, 10*time.Second, "the replay to be applied", func() bool { return r.fsm.Applied() >= before })
	if err := r.barrier(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("after the replay: %v (stopped: %v)", err, r.fsm.Stopped())
	}
	if err := r.fsm.Stopped(); err != nil {
		t.Fatalf("the replica stopped: %v", err)
	}
	if got := r.fsm.Identity(); got != id {
		t.Fatalf("identity %q after the restart, %q before", got, id)
	}
}
