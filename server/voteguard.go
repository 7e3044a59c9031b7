package server

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// voteGuard is the Raft transport of a node that started with an empty
// Raft store without bootstrapping a group: it answers vote and pre-vote
// requests itself, refusing them, until the node has caught up with a
// leader. hashicorp/raft grants a vote to any candidate while its own
// configuration is empty ("the cluster is very likely trying to
// bootstrap"), and an empty store has forgotten every vote the node cast:
// a voter whose data directory was wiped and that restarted under the
// same id would vote a second time in a term it had voted in, and two
// leaders could be elected in one term. A node that is new to its group
// (started to be added with qmqctl join) has cast no vote, and refusing
// until it holds the log costs it nothing.
//
// Caught up means: it has heard a leader's commit index, and its log
// reaches it. The commit index is the first an AppendEntries of the
// latest leader heard carries; one whose commit index is 0 sets none:
// hashicorp/raft's heartbeats carry none (Term and Leader only), and a
// node down long enough for its leader's replication to back off hears a
// heartbeat first, which as a target of 0 let it vote with an empty log.
// An InstallSnapshot carries the snapshot's index, not the commit index
// (it may be behind): it sets none either, and the AppendEntries that
// follows it does. Even caught up, the node refuses votes in any term up
// to the latest leader's it heard: those may be terms it voted in before
// its store was emptied.
//
// What it cannot know is the highest term it voted in before the wipe:
// a vote in a term after the leader's it heard but up to that one may be
// its second in that term. It takes that term only from leaders it hears
// before it has caught up (a later one raises the terms refused, and the
// commit index to reach, so a deposed leader heard first is corrected by
// the group's current one); a candidate of such a term then also needs a
// log as up to date as the node's, which holds the leader's commit.
type voteGuard struct {
	*heartbeatFence
	log       hclog.Logger
	lastIndex func() uint64 // the node's last log index; 0 before Raft runs

	in   <-chan raft.RPC
	out  chan raft.RPC
	done chan struct{}
	stop sync.Once

	mu         sync.Mutex
	term       uint64 // the latest leader's term heard: votes up to it are refused
	heard      bool   // a leader's commit index arrived
	target     uint64 // that commit index: the log must reach it
	targetTerm uint64 // the term of the leader that sent it
	caughtUp   atomic.Bool
	warned     atomic.Bool
}

func newVoteGuard(t *heartbeatFence, log hclog.Logger, lastIndex func() uint64) *voteGuard {
	v := &voteGuard{heartbeatFence: t, log: log, lastIndex: lastIndex, in: t.Consumer(),
		out: make(chan raft.RPC), done: make(chan struct{})}
	go v.forward()
	return v
}

// Consumer is the RPCs Raft is given: all but the votes the guard answers.
func (v *voteGuard) Consumer() <-chan raft.RPC { return v.out }

// SetHeartbeatHandler sees the heartbeats that bypass Consumer, for a
// leader heard of, before Raft does.
func (v *voteGuard) SetHeartbeatHandler(cb func(raft.RPC)) {
	v.heartbeatFence.SetHeartbeatHandler(func(rpc raft.RPC) {
		v.observe(rpc)
		cb(rpc)
	})
}

// Close stops the guard and closes the transport.
func (v *voteGuard) Close() error {
	v.stop.Do(func() { close(v.done) })
	return v.heartbeatFence.Close()
}

func (v *voteGuard) forward() {
	for {
		select {
		case rpc := <-v.in:
			if v.refused(rpc) {
				continue
			}
			select {
			case v.out <- rpc:
			case <-v.done:
				return
			}
		case <-v.done:
			return
		}
	}
}

// observe notes a leader's request, until the node has caught up: its
// term, and the commit index an AppendEntries carries (see voteGuard).
func (v *voteGuard) observe(rpc raft.RPC) {
	var term, commit uint64
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		term, commit = req.Term, req.LeaderCommitIndex
	case *raft.InstallSnapshotRequest:
		term = req.Term
	default:
		return
	}
	if v.caughtUp.Load() {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.term = max(v.term, term)
	if commit > 0 && (!v.heard || term > v.targetTerm) {
		v.heard, v.target, v.targetTerm = true, commit, term
	}
}

// refused answers a vote or pre-vote request the node must not grant,
// and reports whether it did.
func (v *voteGuard) refused(rpc raft.RPC) bool {
	v.observe(rpc)
	var term uint64
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		term = req.Term
	case *raft.RequestPreVoteRequest:
		term = req.Term
	default:
		return false
	}
	if v.allowed(term) {
		return false
	}
	if !v.warned.Swap(true) {
		v.log.Warn("refusing votes until caught up with a leader: this node started with an empty raft store " +
			"and may have voted before it was emptied")
	}
	header := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: v.EncodePeer("", v.LocalAddr())}
	if _, ok := rpc.Command.(*raft.RequestVoteRequest); ok {
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: header}, nil)
	} else {
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: header}, nil)
	}
	return true
}

// allowed reports whether the node may consider a vote in term.
func (v *voteGuard) allowed(term uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.heard || term <= v.term {
		return false
	}
	if !v.caughtUp.Load() {
		if v.lastIndex() < v.target {
			return false
		}
		v.caughtUp.Store(true)
		v.log.Info("caught up with the leader: votes allowed again", "leader-term", v.term, "commit-index", v.target)
	}
	return true
}
