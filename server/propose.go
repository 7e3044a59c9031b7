package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// applyAsync proposes an encoded command; the one place that calls
// raft.Apply. Resolve the future with result.
func (n *Node) applyAsync(cmd []byte) raft.ApplyFuture {
	return n.raft.Apply(cmd, n.cfg.ApplyTimeout)
}

// propose proposes an encoded command and waits until it is committed and
// applied, returning the state machine's response. A refused command comes
// back as an INVALID *transport.Error; losing leadership as NOT_LEADER with
// the leader's client address, which the client retries there (commands are
// safe to retry: sends carry ids the state machine deduplicates).
func (n *Node) propose(ctx context.Context, cmd []byte) (any, error) {
	f := n.applyAsync(cmd)
	done := make(chan struct{})
	go func() {
		f.Error()
		close(done)
	}()
	select {
	case <-done:
		return n.result(f)
	case <-ctx.Done():
		return nil, transport.Errorf(transport.Timeout, "waiting for commit: %v", ctx.Err())
	}
}

// result unpacks a finished apply future.
func (n *Node) result(f raft.ApplyFuture) (any, error) {
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	resp := f.Response()
	if err, ok := resp.(error); ok {
		if errors.Is(err, fsm.ErrInvalid) {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
		return nil, transport.Errorf(transport.Internal, "%v", err)
	}
	return resp, nil
}

// raftError maps a Raft failure to the wire error a client acts on.
func (n *Node) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return n.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return transport.Errorf(transport.Timeout, "raft: %v", err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return transport.Errorf(transport.Unavailable, "node is shutting down")
	}
	return transport.Errorf(transport.Unavailable, "raft: %v", err)
}

// notLeader is the NOT_LEADER error naming the current leader's client
// address, when this node knows it.
func (n *Node) notLeader() error {
	_, id := n.raft.LeaderWithID()
	e := &transport.Error{Code: transport.NotLeader, Message: fmt.Sprintf("node %s is not the leader of group %s", n.cfg.ID, n.cfg.Group)}
	if id != "" {
		e.Leader = n.fsm.MemberAddr(string(id))
	}
	return e
}

// isLeader reports whether this node is the group's leader now.
func (n *Node) isLeader() bool { return n.raft.State() == raft.Leader }
