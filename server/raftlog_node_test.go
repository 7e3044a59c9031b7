package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq"
)

// sendAcked sends n messages to subject from 8 goroutines through the
// nodes at addrs and returns the ids acknowledged.
func sendAcked(t *testing.T, addrs []string, subject string, n int) map[string]bool {
	t.Helper()
	p, err := qmq.NewProducer(strings.Join(addrs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				m := p.GenerateMessage(subject)
				m.SetBody([]byte(strings.Repeat("m", 100+i%200)))
				if err := p.SendMessage(ctx, m); err != nil {
					t.Errorf("send: %v", err)
					return
				}
				mu.Lock()
				acked[m.ID()] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

// wantHeld fails unless n's replica of subject holds exactly the ids in
// acked, each once.
func wantHeld(t *testing.T, n *Node, subject string, acked map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range subjectMessages(t, n, subject) {
		seen[m.ID]++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("%s holds acknowledged %s %d times, want once", n.cfg.ID, id, seen[id])
		}
	}
	if len(seen) != len(acked) {
		t.Errorf("%s holds %d ids in %s, %d acknowledged", n.cfg.ID, len(seen), subject, len(acked))
	}
}

// restart starts n again on its configuration, stopped at cleanup.
func restart(t *testing.T, n *Node) *Node {
	t.Helper()
	r, err := New(n.cfg)
	if err != nil {
		t.Fatalf("restart %s: %v", n.cfg.ID, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A new data directory gets raft-wal; a group stopped and started again
// keeps every acknowledged message, replayed from the WAL: no snapshot was
// taken, so the state machines' checkpoints hold none of them.
func TestGroupOnTheWALKeepsEveryAckedMessageAcrossRestart(t *testing.T) {
	nodes := startGroup(t, func(_ string, c *Config) {
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
	})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.ClientAddr())
		if n.store.kind != RaftLogWAL {
			t.Fatalf("%s opened %q on a new data directory", n.cfg.ID, n.store.kind)
		}
		segs, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, walDir, "*.wal"))
		if len(segs) == 0 {
			t.Fatalf("%s: no segment in %s", n.cfg.ID, walDir)
		}
		if _, err := os.Stat(filepath.Join(n.cfg.DataDir, boltFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s on a new data directory: %v", n.cfg.ID, boltFile, err)
		}
	}
	acked := sendAcked(t, addrs, "kept", 2000)
	leader := leaderOf(nodes)
	waitFor(t, 10*time.Second, "every replica to apply every entry", func() bool {
		for _, n := range nodes {
			if n.fsm.Applied() != leader.fsm.Applied() {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if s := n.Raft().Stats()["last_snapshot_index"]; s != "0" {
			t.Fatalf("%s took a snapshot at %s: the restart would not replay from the WAL", n.cfg.ID, s)
		}
		n.Close()
	}
	var again []*Node
	for _, n := range nodes {
		again = append(again, restart(t, n))
	}
	applied := leader.fsm.Applied()
	waitFor(t, 20*time.Second, "a leader, and every replica to replay the log", func() bool {
		for _, n := range again {
			if n.fsm.Applied() < applied {
				return false
			}
		}
		return leaderOf(again) != nil
	})
	for _, n := range again {
		wantHeld(t, n, "kept", acked)
	}
	addrs = addrs[:0] // the restarted nodes listen on new ports
	for _, n := range again {
		addrs = append(addrs, n.ClientAddr())
	}
	more := sendAcked(t, addrs, "kept", 100)
	for id := range more {
		acked[id] = true
	}
	leader = leaderOf(again)
	waitFor(t, 10*time.Second, "every replica to apply the later sends", func() bool {
		for _, n := range again {
			if n.fsm.Applied() != leader.fsm.Applied() {
				return false
			}
		}
		return true
	})
	for _, n := range again {
		wantHeld(t, n, "kept", acked)
	}
}

// lockedBuffer collects a logger's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A data directory from an earlier version holds raft.db and no WAL: the
// node opens raft-boltdb as before, says so once, keeps its state and
// applies new entries.
func TestDataDirFromAnEarlierVersionStaysOnBolt(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.RaftLog = RaftLogBolt })
	waitLeader(t, n)
	acked := sendAcked(t, []string{n.ClientAddr()}, "old", 300)
	n.Close()
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, boltFile)); err != nil {
		t.Fatalf("the first start left no %s: %v", boltFile, err)
	}

	var logged lockedBuffer
	cfg := n.cfg
	cfg.RaftLog = DefaultConfig().RaftLog
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "n1", Level: hclog.Info, Output: &logged})
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	waitLeader(t, r)
	if r.store.kind != RaftLogBolt {
		t.Fatalf("reopened on %q", r.store.kind)
	}
	const line = "raft log: raft-boltdb (data directory from an earlier version)"
	if c := strings.Count(logged.String(), line); c != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", line, c, logged.String())
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, walDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s created beside %s: %v", walDir, boltFile, err)
	}
	wantHeld(t, r, "old", acked)
	for id := range sendAcked(t, []string{r.ClientAddr()}, "old", 50) {
		acked[id] = true
	}
	wantHeld(t, r, "old", acked)
}

// A data directory holding both stores is refused before anything in it
// is opened.
func TestDataDirWithBothRaftLogsIsRefused(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) { c.RaftLog = RaftLogBolt })
	waitLeader(t, n)
	n.Close()
	if err := os.Mkdir(filepath.Join(n.cfg.DataDir, walDir), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(n.cfg)
	if !errors.Is(err, ErrTwoRaftLogs) || !strings.Contains(err.Error(), n.cfg.DataDir) {
		t.Fatalf("start: %v, want ErrTwoRaftLogs naming %s", err, n.cfg.DataDir)
	}
	t.Log(err)
}

// A second node on a running node's data directory is refused before it
// opens the state machine, whose open cuts the logs back to their
// checkpoint under the running node.
func TestSecondNodeOnADataDirIsRefusedAndHarmsNothing(t *testing.T) {
	n := startNode(t, "n1", true, func(c *Config) {
		c.SnapshotInterval, c.SnapshotThreshold = time.Hour, 1<<40
	})
	waitLeader(t, n)
	acked := sendAcked(t, []string{n.ClientAddr()}, "mine", 200)
	cfg := n.cfg
	cfg.ClientAddr, cfg.RaftAddr, cfg.HTTPAddr = "127.0.0.1:0", freeAddr(t), ""
	if second, err := New(cfg); !errors.Is(err, ErrRaftLogInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second node: %v, want ErrRaftLogInUse", err)
	}
	wantHeld(t, n, "mine", acked)
	for id := range sendAcked(t, []string{n.ClientAddr()}, "mine", 20) {
		acked[id] = true
	}
	wantHeld(t, n, "mine", acked)
}
