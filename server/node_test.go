package server

import (
	"io"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testport"
	"github.com/qmqgo/qmq/transport"
)

// freeAddr returns a loopback address free a moment ago (testport.Addr).
func freeAddr(t testing.TB) string { return testport.Addr(t) }

// testLogger routes a node's logs through t.Log.
func testLogger(t testing.TB, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: tWriter{t}})
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

var _ io.Writer = tWriter{}

// startNode starts a node with fast Raft timings; it stops at cleanup.
func startNode(t testing.TB, id string, bootstrap bool, tweak func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = id, "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr, cfg.HTTPAddr = "127.0.0.1:0", freeAddr(t), "127.0.0.1:0"
	cfg.Bootstrap = bootstrap
	cfg.SetElectionTimeout(300 * time.Millisecond)
	cfg.Logger = testLogger(t, id)
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// clientOf returns a client of the nodes at addrs, closed when the test ends.
func clientOf(t testing.TB, addrs ...string) *transport.LeaderClient {
	t.Helper()
	c, err := transport.NewLeaderClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, what, cond)
}

func waitLeader(t testing.TB, n *Node) {
	waitFor(t, 10*time.Second, "leadership", func() bool {
		// A group the node formed takes sends once it set its version.
		return n.isLeader() && n.fsm.MemberAddr(n.cfg.ID) == n.ClientAddr() && !n.bootstrapped.Load()
	})
}
