package server

import (
	"context"
	"net"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
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

// startLeading starts the broker leader's work for one term.
func (n *Node) startLeading(ctx context.Context) {
	n.goLoop(func() { n.sessions.run(ctx) })
	n.goLoop(func() { n.announce(ctx, n.clientAddr) })
}
