package server

import (
	"io"
	"os"
	"sync/atomic"
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

// guardedNode is a vote guard on a transport of its own, over a log whose
// last index is *last, with the vote requests it forwards to Raft in
// forwarded (answered granted, as Raft does with an empty configuration).
func guardedNode(t *testing.T, last *atomic.Uint64) (*voteGuard, <-chan uint64) {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	v := newVoteGuard(&heartbeatFence{NetworkTransport: trans}, hclog.NewNullLogger(), last.Load)
	t.Cleanup(func() { v.Close() })
	v.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: false}, nil) })
	forwarded := make(chan uint64, 16)
	go func() {
		for rpc := range v.Consumer() {
			switch req := rpc.Command.(type) {
			case *raft.RequestVoteRequest:
				forwarded <- req.Term
				rpc.Respond(&raft.RequestVoteResponse{Term: req.Term, Granted: true}, nil)
			default:
				rpc.Respond(&raft.AppendEntriesResponse{Success: false}, nil)
			}
		}
	}()
	return v, forwarded
}

// fromLeader sends the guarded node an AppendEntries of a leader in term
// with commit index commit; none (0 entries, no previous entry, commit 0)
// is what hashicorp/raft's heartbeat sends, Term and Leader only.
func fromLeader(t *testing.T, to raft.ServerAddress, term, commit uint64, entries int) {
	t.Helper()
	leader, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	addr := leader.EncodePeer("leader", leader.LocalAddr())
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("leader"), Addr: addr},
		Term: term, Leader: addr, LeaderCommitIndex: commit}
	for i := range entries {
		req.Entries = append(req.Entries, &raft.Log{Index: uint64(i + 1), Term: term, Type: raft.LogNoop})
	}
	var resp raft.AppendEntriesResponse
	if err := leader.AppendEntries("target", to, req, &resp); err != nil {
		t.Fatal(err)
	}
}

// wantVote asks the guarded node for its vote in term and checks whether
// the guard let the request through to Raft.
func wantVote(t *testing.T, v *voteGuard, forwarded <-chan uint64, term uint64, through bool) {
	t.Helper()
	granted := requestVote(t, string(v.LocalAddr()), term)
	select {
	case got := <-forwarded:
		if !through {
			t.Fatalf("a vote in term %d reached raft (granted %v)", got, granted)
		}
	default:
		if through {
			t.Fatalf("the guard refused a vote in term %d", term)
		}
	}
}

// hashicorp/raft's heartbeats carry no commit index (LeaderCommitIndex 0,
// no entries, no previous entry): a wiped voter whose first word from its
// leader is a heartbeat must not take 0 for the log it has to reach, and
// vote with an empty log. The first AppendEntries that carries a commit
// index sets what it must reach.
func TestVoteGuardTakesNoTargetFromAHeartbeat(t *testing.T) {
	var last atomic.Uint64 // an empty log
	v, forwarded := guardedNode(t, &last)
	fromLeader(t, v.LocalAddr(), 7, 0, 0)
	wantVote(t, v, forwarded, 8, false)
	fromLeader(t, v.LocalAddr(), 7, 1000, 0) // a probe: no entries, the leader's commit index
	wantVote(t, v, forwarded, 8, false)
	last.Store(999)
	wantVote(t, v, forwarded, 8, false)
	last.Store(1000)
	wantVote(t, v, forwarded, 7, false) // a term it may have voted in
	wantVote(t, v, forwarded, 8, true)
}

// A leader of a later term heard while catching up (the first one heard
// was deposed, or behind) raises both the terms refused and the commit
// index to reach; a request of an earlier term, heard later, lowers
// neither.
func TestVoteGuardFollowsALaterLeader(t *testing.T) {
	var last atomic.Uint64
	v, forwarded := guardedNode(t, &last)
	fromLeader(t, v.LocalAddr(), 3, 10, 1)
	fromLeader(t, v.LocalAddr(), 9, 500, 0) // the group's leader now
	fromLeader(t, v.LocalAddr(), 3, 10, 0)  // the deposed one, late
	last.Store(10)
	wantVote(t, v, forwarded, 10, false)
	last.Store(500)
	wantVote(t, v, forwarded, 9, false)
	wantVote(t, v, forwarded, 10, true)
}
