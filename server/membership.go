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
func (n *Node) handleJoin(ctx context.Context, p []byte) ([]byte, error) {
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
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	f := n.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.RaftAddr), 0, n.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, n.raftError(err)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	if _, err := n.propose(ctx, (&fsm.SetMember{ID: req.ID, ClientAddr: req.ClientAddr}).Encode()); err != nil {
		return nil, err
	}
	n.log.Info("node joined", "id", req.ID, "raft", req.RaftAddr, "client", req.ClientAddr)
	return nil, nil
}

// handleLeave removes a node from the group.
func (n *Node) handleLeave(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.LeaveRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := fsm.CheckName("node id", req.ID); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	if err := n.raft.RemoveServer(raft.ServerID(req.ID), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return nil, n.raftError(err)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	if _, err := n.propose(ctx, (&fsm.SetMember{ID: req.ID}).Encode()); err != nil {
		return nil, err
	}
	n.log.Info("node left", "id", req.ID)
	return nil, nil
}

// handleTransfer hands leadership to the named voter, or to the most
// up-to-date one, and waits until it has it: an operator restarting the
// leader does this first so that clients see one quick handover instead of
// an election timeout.
func (n *Node) handleTransfer(p []byte) ([]byte, error) {
	var req transport.TransferRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	var f raft.Future
	if req.ID == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		if err := fsm.CheckName("node id", req.ID); err != nil {
			return nil, transport.Errorf(transport.Invalid, "%v", err)
		}
		addr := ""
		if cf := n.raft.GetConfiguration(); cf.Error() == nil {
			for _, s := range cf.Configuration().Servers {
				if string(s.ID) == req.ID && s.Suffrage == raft.Voter {
					addr = string(s.Address)
				}
			}
		}
		if addr == "" {
			return nil, transport.Errorf(transport.Invalid, "node %s is not a voter of group %s", req.ID, n.cfg.Group)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(req.ID), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return nil, transport.Errorf(transport.Unavailable, "leadership transfer: %v", err)
	}
	n.log.Info("leadership transferred", "to", req.ID)
	return nil, nil
}

// watchLeadership starts the leader-only work when this node becomes the
// leader and cancels it the moment leadership is lost.
func (n *Node) watchLeadership() {
	var lead *leadership
	defer func() { lead.stop() }()
	for {
		select {
		case leader := <-n.leaderCh:
			n.metrics.leaderChanges.Inc()
			switch {
			case leader && lead == nil:
				n.log.Info("became leader")
				lead = n.startLeading()
			case !leader && lead != nil:
				n.log.Info("lost leadership")
				lead.stop()
				lead = nil
			}
		case <-n.ctx.Done():
			return
		}
	}
}

// leadership is the leader-only work of one term as leader.
type leadership struct{ cancel context.CancelFunc }

func (n *Node) startLeading() *leadership {
	ctx, cancel := context.WithCancel(n.ctx)
	n.goLoop(func() { n.sessions.run(ctx) })
	n.goLoop(func() { n.announce(ctx) })
	return &leadership{cancel: cancel}
}

func (l *leadership) stop() {
	if l != nil {
		l.cancel()
	}
}

// announce records this node's client address in the group's state if it
// is missing or stale (a bootstrapped node, or one that moved).
func (n *Node) announce(ctx context.Context) {
	if n.fsm.MemberAddr(n.cfg.ID) == n.clientAddr {
		return
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	if _, err := n.propose(ctx, (&fsm.SetMember{ID: n.cfg.ID, ClientAddr: n.clientAddr}).Encode()); err != nil {
		n.log.Warn("recording this node's client address", "error", err)
	}
}
