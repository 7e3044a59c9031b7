package testcluster

import (
	"testing"
	"time"

	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
)

// electionTimeout is short, so that a one-node group leads well within a
// second, and long enough that a loaded machine under -race keeps it.
const electionTimeout = 300 * time.Millisecond

// leadTimeout bounds the wait for a node to lead its group.
const leadTimeout = 10 * time.Second

// BrokerConfig is the config of a one-node broker group: node "n1" of
// group "g1", bootstrapped, with a data directory of the test's, a Raft
// address from Addr, a client address the kernel picks, a 300 ms election
// timeout and Logger's logger. A test that restarts the node at the same
// client address sets ClientAddr to an Addr of its own.
func BrokerConfig(tb testing.TB) server.Config {
	cfg := server.DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir, cfg.Bootstrap = "n1", "g1", tb.TempDir(), true
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", Addr(tb)
	cfg.SetElectionTimeout(electionTimeout)
	cfg.Logger = Logger(tb)
	return cfg
}

// StartBroker starts a broker node with cfg, closes it when the test
// ends, and returns it once it leads its group and knows its leader's
// address.
func StartBroker(tb testing.TB, cfg server.Config) *server.Node {
	tb.Helper()
	n, err := server.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	poll.Until(tb, leadTimeout, "broker "+cfg.BrokerGroup+"/"+cfg.ID+" to lead", func() bool {
		s := n.Status()
		return s.State == "Leader" && s.LeaderAddr != ""
	})
	return n
}

// Broker starts a one-node broker group of BrokerConfig, changed first by
// tweak when it is not nil; see StartBroker.
func Broker(tb testing.TB, tweak func(*server.Config)) *server.Node {
	tb.Helper()
	cfg := BrokerConfig(tb)
	if tweak != nil {
		tweak(&cfg)
	}
	return StartBroker(tb, cfg)
}

// Registered is a tweak for Broker: the node is the one-node group group
// ("<group>-n1"), registered with the metaserver at meta and heartbeating
// it every 100 ms.
func Registered(group, meta string) func(*server.Config) {
	return func(c *server.Config) {
		c.ID, c.BrokerGroup = group+"-n1", group
		c.Meta, c.MetaHeartbeat = []string{meta}, 100*time.Millisecond
	}
}
