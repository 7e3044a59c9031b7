package testcluster

import (
	"testing"

	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
)

// Meta starts a one-node metaserver group: node "m1", bootstrapped, with a
// data directory of the test's, a Raft address from Addr, a client address
// the kernel picks, a 300 ms election timeout and Logger's logger, changed
// by tweak when it is not nil. The node is closed when the test ends, and
// returned once it leads.
func Meta(tb testing.TB, tweak func(*server.MetaConfig)) *server.MetaNode {
	tb.Helper()
	cfg := server.DefaultMetaConfig()
	cfg.ID, cfg.DataDir, cfg.Bootstrap = "m1", tb.TempDir(), true
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", Addr(tb)
	cfg.SetElectionTimeout(electionTimeout)
	cfg.Logger = Logger(tb)
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := server.NewMeta(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	poll.Until(tb, leadTimeout, "metaserver "+cfg.ID+" to lead", func() bool {
		return m.Status().State == "Leader"
	})
	return m
}
