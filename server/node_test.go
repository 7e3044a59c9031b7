package server

import (
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/await"
	"github.com/qmqgo/qmq/transport"
)

// freeAddr returns a loopback address with a port free at the time of the
// call and not returned before by this test binary (until all 20,768 have
// been). Its ports lie below Linux's ephemeral range (32768 up), which a
// port the kernel picks (for a connection's own end, or a listener on
// port 0) comes from: a node
// started on it later cannot find it taken by a connection made meanwhile.
func freeAddr(t testing.TB) string {
	t.Helper()
	testPorts.Lock()
	defer testPorts.Unlock()
	for range 1000 {
		testPorts.next++
		port := testPortsFirst + (testPorts.offset+testPorts.next)%(testPortsEnd-testPortsFirst)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by something else
		}
		defer l.Close()
		return l.Addr().String()
	}
	t.Fatal("no free port left for a test node")
	return ""
}

// testPortsFirst and testPortsEnd bound freeAddr's ports.
const testPortsFirst, testPortsEnd = 12000, 32768

// testPorts walks the ports from a random point, so that two runs of the
// binary at once (go test -count, another checkout) seldom meet.
var testPorts = struct {
	sync.Mutex
	offset, next int
}{offset: rand.IntN(testPortsEnd - testPortsFirst)}

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
	cfg.ID, cfg.Group, cfg.DataDir = id, "g1", t.TempDir()
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
func clientOf(t testing.TB, addrs ...string) *transport.GroupClient {
	t.Helper()
	c, err := transport.NewGroupClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	await.True(t, timeout, what, cond)
}

func waitLeader(t testing.TB, n *Node) {
	waitFor(t, 10*time.Second, "leadership", func() bool {
		return n.isLeader() && n.fsm.MemberAddr(n.cfg.ID) == n.ClientAddr()
	})
}
