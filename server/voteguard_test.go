package server

import (
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// requestVote asks the node at addr, as candidate "intruder", for its vote
// in term, with a log as long as any.
func requestVote(t *testing.T, addr string, term uint64) bool {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: trans.EncodePeer("intruder", trans.LocalAddr())},
		Term:      term, LastLogIndex: 1 << 40, LastLogTerm: term,
	}
	var resp raft.RequestVoteResponse
	if err := trans.RequestVote("target", raft.ServerAddress(addr), req, &resp); err != nil {
		t.Fatalf("RequestVote: %v", err)
	}
	return resp.Granted
}

// A node started with an empty Raft store (new, or a voter whose data
// directory was wiped) must not vote before it has caught up: its store
// has forgotten the votes it cast, and hashicorp/raft grants any vote
// while its configuration is empty.
func TestEmptyStoreNodeRefusesVotesUntilCaughtUp(t *testing.T) {
	n := startNode(t, "n9", false, nil)
	if requestVote(t, n.cfg.RaftAddr, 5) {
		t.Fatal("a node with an empty raft store granted a vote before hearing from any leader")
	}
}

// A voter whose data directory was wiped and that restarted under its id
// catches up from the leader without voting meanwhile, refuses votes in
// its leader's term and before, and then takes part in elections again:
// with it and one other node the group elects a leader once the old
// leader goes, which takes both their votes.
func TestWipedVoterCatchesUpAndVotesAgain(t *testing.T) {
	nodes := startGroup(t, func(_ string, c *Config) { c.Logger = hclog.NewNullLogger() })
	leader := leaderOf(nodes)
	var wiped *Node
	for _, n := range nodes {
		if n != leader {
			wiped = n
			break
		}
	}
	sendAcked(t, clientAddrs(nodes), "orders", 20)
	term := wiped.raft.CurrentTerm()
	cfg := wiped.cfg
	if err := wiped.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	back, err := New(cfg)
	if err != nil {
		t.Fatalf("restart with a wiped directory: %v", err)
	}
	t.Cleanup(func() { back.Close() })
	waitFor(t, 10*time.Second, "the wiped voter to catch up", func() bool {
		return back.fsm.Applied() == leader.fsm.Applied()
	})
	if requestVote(t, cfg.RaftAddr, term) {
		t.Fatalf("the wiped voter granted a vote in term %d, one it had voted in", term)
	}
	if requestVote(t, cfg.RaftAddr, leader.raft.CurrentTerm()) {
		t.Fatal("the wiped voter granted a vote in its leader's term")
	}
	// It votes again in later terms: without the old leader, it and the
	// third node elect one.
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	var rest []*Node
	for _, n := range nodes {
		if n != leader && n != wiped {
			rest = append(rest, n)
		}
	}
	rest = append(rest, back)
	waitFor(t, 20*time.Second, "a leader of the two left", func() bool { return leaderOf(rest) != nil })
}
