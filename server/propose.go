package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/transport"
)

// applyAsync proposes an encoded command, with extensions (nil for none:
// see fsm.IdentityExtension) on its entry; the one place that calls
// raft.ApplyLog. Resolve the future with result.
//
// It is where every proposal passes the group's version gate (gate): a
// command needing a Number past the active one is refused here, as an
// INTERNAL error, and never reaches the log.
func (g *raftGroup) applyAsync(cmd []byte, extensions ...[]byte) raft.ApplyFuture {
	if err := g.gate(cmd); err != nil {
		g.log.Error("a proposal past the group's version gate, refused", "error", err)
		return refusedFuture{transport.Errorf(transport.Internal, "%v", err)}
	}
	var ext []byte
	if len(extensions) > 0 {
		ext = extensions[0]
	}
	f := g.raft.ApplyLog(raft.Log{Data: cmd, Extensions: ext}, g.applyTimeout)
	if g.committed == nil || len(cmd) == 0 {
		return f
	}
	return &timedFuture{ApplyFuture: f, start: time.Now(), cmd: cmd[0]}
}

// timedFuture is a proposal's future with when it was proposed, so that
// result observes its commit time (raftGroup.committed): from then to when
// the state machine began applying it here (raftGroup.applyBegan).
type timedFuture struct {
	raft.ApplyFuture
	start time.Time
	cmd   byte
}

// propose proposes an encoded command and waits until it is committed and
// applied, returning the state machine's response. A refused command comes
// back as an INVALID *transport.Error; losing leadership as NOT_LEADER with
// the leader's client address, which the client retries there (commands are
// safe to retry: sends carry ids the state machine deduplicates).
func (g *raftGroup) propose(ctx context.Context, cmd []byte) (any, error) {
	return g.proposeWith(ctx, cmd, nil)
}

// proposeWith is propose with the entry's extensions.
func (g *raftGroup) proposeWith(ctx context.Context, cmd, extensions []byte) (any, error) {
	f := g.applyAsync(cmd, extensions)
	done := make(chan struct{})
	go func() {
		f.Error()
		close(done)
	}()
	select {
	case <-done:
		return g.result(f)
	case <-ctx.Done():
		return nil, transport.Errorf(transport.Timeout, "waiting for commit: %v", ctx.Err())
	}
}

// result unpacks a finished apply future.
func (g *raftGroup) result(f raft.ApplyFuture) (any, error) {
	err := f.Error()
	if tf, ok := f.(*timedFuture); ok && err == nil && g.applyBegan != nil {
		if began, ok := g.applyBegan.began(f.Index()); ok {
			g.committed(tf.cmd, began.Sub(tf.start))
		}
	}
	if err != nil {
		var refused *transport.Error // a proposal the gate refused
		if errors.As(err, &refused) {
			return nil, refused
		}
		return nil, g.raftError(err)
	}
	resp := f.Response()
	if err, ok := resp.(error); ok {
		if errors.Is(err, fsm.ErrStaleConsumer) {
			return nil, transport.Errorf(transport.StaleConsumer, "%v", err)
		}
		if errors.Is(err, fsm.ErrInvalid) || errors.Is(err, meta.ErrInvalid) {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
		return nil, transport.Errorf(transport.Internal, "%v", err)
	}
	return resp, nil
}

// raftError maps a Raft failure to the wire error a client acts on.
func (g *raftGroup) raftError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return g.notLeader()
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return transport.Errorf(transport.Timeout, "raft: %v", err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return transport.Errorf(transport.Unavailable, "node is shutting down")
	}
	return transport.Errorf(transport.Unavailable, "raft: %v", err)
}

// notLeader is the NOT_LEADER error naming the current leader's client
// address, when this node knows it.
func (g *raftGroup) notLeader() error {
	_, id := g.raft.LeaderWithID()
	e := &transport.Error{Code: transport.NotLeader, Message: fmt.Sprintf("node %s is not the leader of group %s", g.id, g.group)}
	if id != "" {
		e.Leader = g.memberAddr(string(id))
	}
	return e
}

// isLeader reports whether this node is the group's leader now.
func (g *raftGroup) isLeader() bool { return g.raft.State() == raft.Leader }
