package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server/raftlog"
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
		if n.store.Kind() != raftlog.WAL {
			t.Fatalf("%s opened %q on a new data directory", n.cfg.ID, n.store.Kind())
		}
		segs, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, raftlog.WALDir, "*.wal"))
		if len(segs) == 0 {
			t.Fatalf("%s: no segment in %s", n.cfg.ID, raftlog.WALDir)
		}
		if _, err := os.Stat(filepath.Join(n.cfg.DataDir, raftlog.BoltFile)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s on a new data directory: %v", n.cfg.ID, raftlog.BoltFile, err)
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
	n := startNode(t, "n1", true, func(c *Config) { c.RaftLog = raftlog.Bolt })
	waitLeader(t, n)
	acked := sendAcked(t, []string{n.ClientAddr()}, "old", 300)
	n.Close()
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, raftlog.BoltFile)); err != nil {
		t.Fatalf("the first start left no %s: %v", raftlog.BoltFile, err)
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
	if r.store.Kind() != raftlog.Bolt {
		t.Fatalf("reopened on %q", r.store.Kind())
	}
	const line = "raft log: raft-boltdb (data directory from an earlier version)"
	if c := strings.Count(logged.String(), line); c != 1 {
		t.Fatalf("%q logged %d times, want once:\n%s", line, c, logged.String())
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, raftlog.WALDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s created beside %s: %v", raftlog.WALDir, raftlog.BoltFile, err)
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
	n := startNode(t, "n1", true, func(c *Config) { c.RaftLog = raftlog.Bolt })
	waitLeader(t, n)
	n.Close()
	if err := os.Mkdir(filepath.Join(n.cfg.DataDir, raftlog.WALDir), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := New(n.cfg)
	if !errors.Is(err, raftlog.ErrTwoStores) || !strings.Contains(err.Error(), n.cfg.DataDir) {
		t.Fatalf("start: %v, want raftlog.ErrTwoStores naming %s", err, n.cfg.DataDir)
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
	if second, err := New(cfg); !errors.Is(err, raftlog.ErrInUse) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second node: %v, want raftlog.ErrInUse", err)
	}
	wantHeld(t, n, "mine", acked)
	for id := range sendAcked(t, []string{n.ClientAddr()}, "mine", 20) {
		acked[id] = true
	}
	wantHeld(t, n, "mine", acked)
}

// heapAfterGC is the heap in use once garbage is collected: twice, so
// that what sync.Pools hold goes too.
func heapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// nopFSM applies nothing and holds nothing.
type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (nopFSM) Restore(r io.ReadCloser) error       { return r.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnapshot) Release()                          {}

// The log cache held 1,024 entries whatever their size: 48 entries of
// 1 MiB stayed in memory after they were committed, with the proposals'
// futures. The cache now holds at most its bytes.
func TestRaftGroupHoldsAtMostItsLogCacheAfterLargeEntries(t *testing.T) {
	const cache = 8 << 20
	g := &raftGroup{id: "n1", group: "g1", log: hclog.NewNullLogger(), applyTimeout: 10 * time.Second}
	timing := DefaultConfig().RaftTiming
	timing.SetElectionTimeout(200 * time.Millisecond)
	if err := g.open(raftSetup{dir: t.TempDir(), addr: freeAddr(t), bootstrap: true, timing: timing,
		fsm: nopFSM{}, snaps: raft.NewInmemSnapshotStore(), raftLog: raftlog.WAL, logCache: cache}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		err := g.shutdown()
		if err = errors.Join(append(g.closeStores(), err)...); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.watchLeadership(ctx, func() {}, func(context.Context) {})
	waitFor(t, 10*time.Second, "leadership", g.leading.Load)
	if err := g.raft.Barrier(10 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	before := heapAfterGC()
	for i := range 48 {
		data := bytes.Repeat([]byte{byte(i)}, 1<<20)
		if err := g.raft.Apply(data, 10*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	held := heapAfterGC() - before
	t.Logf("held %.1f MiB", float64(held)/(1<<20))
	// The cache, the tail segment's buffer (2 MiB for 1 MiB entries), and
	// 2 MiB for raft's and the store's own.
	if held > cache+4<<20 {
		t.Fatalf("the group holds %.1f MiB after 48 entries of 1 MiB, want at most %d MiB", float64(held)/(1<<20), (cache+4<<20)>>20)
	}
}
