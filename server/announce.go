package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// addressCheck is how often a follower checks that the group's state holds
// its client address.
const addressCheck = 500 * time.Millisecond

// keepAddressRecorded has a follower whose client address the group's state
// does not hold (it moved, or restarted on another port) ask the leader to
// record it, with the join request a member may repeat: a new leader reads
// its voters' clocks at the recorded addresses before it serves anything
// time-dependent, so a stale one would leave it waiting.
func (n *Node) keepAddressRecorded(ctx context.Context) {
	tick := time.NewTicker(addressCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n.isLeader() || n.fsm.MemberAddr(n.cfg.ID) == n.clientAddr {
			continue // a leader records its own (announce)
		}
		_, leaderID := n.raft.LeaderWithID()
		leader := n.fsm.MemberAddr(string(leaderID))
		raftAddr := string(n.trans.LocalAddr())
		if leader == "" || !n.isVoter(n.cfg.ID, raftAddr) {
			continue
		}
		req, _ := json.Marshal(transport.JoinRequest{ID: n.cfg.ID, RaftAddr: raftAddr, ClientAddr: n.clientAddr})
		if err := n.callOnce(ctx, leader, transport.TypeJoin, req); err != nil {
			n.log.Warn("asking the leader to record this node's client address", "leader", leader, "error", err)
			continue
		}
		n.log.Info("client address recorded", "client", n.clientAddr)
	}
}

// callOnce sends one request to addr on a connection of its own, bounded
// by five seconds.
func (g *raftGroup) callOnce(ctx context.Context, addr string, t transport.Type, payload []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := g.dial.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Call(ctx, t, payload)
	return err
}
