package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// handleJoin adds a node to the group as a voter and records its client
// address, so that every member can point clients at it when it leads.
// Joining a node that is already a member with the same addresses succeeds.
func (g *raftGroup) handleJoin(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.JoinRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("node id", req.ID); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	for _, a := range []string{req.RaftAddr, req.ClientAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, transport.Errorf(transport.Invalid, "address %q: %v", a, err)
		}
	}
	if !g.isLeader() {
		return nil, g.notLeader()
	}
	g.gateMu.Lock()
	defer g.gateMu.Unlock()
	// Under gateMu, after every entry committed so far is applied here: a
	// raise of the active version a previous leader committed is then
	// known to joinerSupportsActive.
	bctx, bcancel := g.requestContext(ctx)
	err := g.barrier(bctx)
	bcancel()
	if err != nil {
		return nil, g.raftError(err)
	}
	if !g.isVoter(req.ID, req.RaftAddr) {
		// A voter that cannot be reached costs the group its quorum (a
		// one-node group stops at once), so a mistyped join must fail here.
		if err := g.checkJoiner(ctx, &req); err != nil {
			return nil, transport.Errorf(transport.Invalid, "refusing to add node %s: %v", req.ID, err)
		}
		// A nonvoter first, promoted once it has caught up: a new node
		// refuses votes until then (voteGuard), and a voter that did while
		// its vote was needed (a leader of two that stepped down before the
		// newcomer caught up) left the group with no leader ever after.
		nf := g.raft.AddNonvoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, g.applyTimeout)
		if err := nf.Error(); err != nil {
			return nil, g.raftError(err)
		}
		cctx, ccancel := g.requestContext(ctx)
		err := g.awaitCaughtUp(cctx, &req, max(nf.Index(), g.raft.CommitIndex()))
		ccancel()
		if err != nil {
			return nil, err
		}
	}
	f := g.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, g.applyTimeout)
	if err := f.Error(); err != nil {
		return nil, g.raftError(err)
	}
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	if _, err := g.propose(ctx, g.setMember(req.ID, req.ClientAddr)); err != nil {
		return nil, err
	}
	g.log.Info("node joined", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	return nil, nil
}

// awaitCaughtUp waits until the joining node's log holds index and it
// knows index committed (what voteGuard asks of it before it votes; its
// state machine may stay behind index for good, as configuration entries
// are not applied to it), asking it for its status every 50 ms, until ctx
// ends.
func (g *raftGroup) awaitCaughtUp(ctx context.Context, req *transport.JoinRequest, index uint64) error {
	conn, err := g.dial.Dial(ctx, req.ClientAddr)
	if err != nil {
		return transport.Errorf(transport.Unavailable, "node %s, added as a nonvoter, does not answer: %v", req.ID, err)
	}
	defer conn.Close()
	var has uint64
	for {
		if st, err := joinerStatus(ctx, conn); err == nil {
			if has = min(st.LastIndex, st.CommitIndex); has >= index {
				return nil
			}
		}
		if !wait.Sleep(ctx, 50*time.Millisecond) {
			return transport.Errorf(transport.Unavailable, "node %s, added as a nonvoter, had caught up to %d of %d when the join's time ran out: join it again to promote it once it has",
				req.ID, has, index)
		}
	}
}

// joinerStatus asks a joining node for its status on conn.
func joinerStatus(ctx context.Context, conn *transport.Conn) (transport.Status, error) {
	var st transport.Status
	body, err := conn.Call(ctx, transport.TypeStatus, nil)
	if err != nil {
		return st, fmt.Errorf("its client address does not answer a status request: %w", err)
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("its status: %w", err)
	}
	return st, nil
}

// isVoter reports whether id is already a voter at raftAddr.
func (g *raftGroup) isVoter(id, raftAddr string) bool {
	f := g.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && string(s.Address) == raftAddr && s.Suffrage == raft.Voter {
			return true
		}
	}
	return false
}

// checkJoiner asks the joining node for its status and checks that it is
// the node the request names: its id, its Raft address, and a node of this
// group (a broker node cannot join the metaserver group, nor one group's
// node another's).
func (g *raftGroup) checkJoiner(ctx context.Context, req *transport.JoinRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := g.dial.Dial(ctx, req.ClientAddr)
	if err != nil {
		return fmt.Errorf("its client address does not answer: %w", err)
	}
	defer conn.Close()
	st, err := joinerStatus(ctx, conn)
	if err != nil {
		return err
	}
	switch {
	case st.ID != req.ID:
		return fmt.Errorf("%s is node %q, not %q", req.ClientAddr, st.ID, req.ID)
	case st.Group != g.group:
		return fmt.Errorf("node %s is a node of group %q, not %q", st.ID, st.Group, g.group)
	case st.RaftAddr != req.RaftAddr:
		return fmt.Errorf("node %s listens for Raft on %s, not %s", st.ID, st.RaftAddr, req.RaftAddr)
	}
	// A Raft address by name must resolve now: a voter no member can dial
	// costs the group a vote.
	if host, _, _ := net.SplitHostPort(req.RaftAddr); !ipHost(host) {
		if _, err := net.DefaultResolver.LookupHost(ctx, host); err != nil {
			return fmt.Errorf("its Raft address %s does not resolve: %w", req.RaftAddr, err)
		}
	}
	if err := g.joinerSupportsActive(&st); err != nil {
		return err
	}
	if g.joinerOK != nil {
		return g.joinerOK(&st)
	}
	return nil
}

// handleLeave removes a node from the group.
func (g *raftGroup) handleLeave(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.LeaveRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("node id", req.ID); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if !g.isLeader() {
		return nil, g.notLeader()
	}
	if err := g.raft.RemoveServer(raft.ServerID(req.ID), 0, g.applyTimeout).Error(); err != nil {
		return nil, g.raftError(err)
	}
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	if _, err := g.propose(ctx, g.setMember(req.ID, "")); err != nil {
		return nil, err
	}
	g.log.Info("node left", "id", req.ID)
	return nil, nil
}

// handleTransfer hands leadership to the named voter, or to the most
// up-to-date one, and waits until it has it: an operator restarting the
// leader does this first so that clients see one quick handover instead of
// an election timeout.
func (g *raftGroup) handleTransfer(p []byte) ([]byte, error) {
	var req transport.TransferRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if !g.isLeader() {
		return nil, g.notLeader()
	}
	var f raft.Future
	if req.ID == "" {
		f = g.raft.LeadershipTransfer()
	} else {
		if err := fsm.CheckName("node id", req.ID); err != nil {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
		addr := ""
		if cf := g.raft.GetConfiguration(); cf.Error() == nil {
			for _, s := range cf.Configuration().Servers {
				if string(s.ID) == req.ID && s.Suffrage == raft.Voter {
					addr = string(s.Address)
				}
			}
		}
		if addr == "" {
			return nil, transport.Errorf(transport.Invalid, "node %s is not a voter of group %s", req.ID, g.group)
		}
		f = g.raft.LeadershipTransferToServer(raft.ServerID(req.ID), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return nil, transport.Errorf(transport.Unavailable, "leadership transfer: %v", err)
	}
	g.log.Info("leadership transferred", "to", req.ID)
	return nil, nil
}
