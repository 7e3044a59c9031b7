package metaserver

import (
	"context"
	"encoding/json"

	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/transport"
)

// The broker nodes' side: registration, deregistration and the heartbeats
// that feed health, and the cluster view an operator reads.

func (m *Server) handleRegister(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.RegisterRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	want := meta.Node{RaftAddr: req.RaftAddr, ClientAddr: req.ClientAddr, HTTPAddr: req.HTTPAddr}
	if g, ok := m.fsm.BrokerGroup(req.BrokerGroup); ok && g.Nodes[req.ID] == want {
		return nil, nil // a restart with the same addresses: nothing to record
	}
	cmd := &meta.Register{BrokerGroup: req.BrokerGroup, ID: req.ID, RaftAddr: req.RaftAddr, ClientAddr: req.ClientAddr, HTTPAddr: req.HTTPAddr}
	if err := m.proposeChecked(ctx, cmd); err != nil {
		return nil, err
	}
	m.log.Info("broker node registered", "broker_group", req.BrokerGroup, "id", req.ID, "client", req.ClientAddr)
	return nil, nil
}

func (m *Server) handleDeregister(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.DeregisterRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if err := m.proposeChecked(ctx, &meta.Deregister{BrokerGroup: req.BrokerGroup, ID: req.ID}); err != nil {
		return nil, err
	}
	m.health.forget(req.BrokerGroup, req.ID)
	m.log.Info("broker node deregistered", "broker_group", req.BrokerGroup, "id", req.ID)
	return nil, nil
}

// handleBrokerHeartbeat records a broker node's report and answers whether
// its group takes sends, with the applications when the node's are not
// the metaserver's: an application's change reaches every broker by its
// next heartbeat (MetaHeartbeat, 2 s by default).
func (m *Server) handleBrokerHeartbeat(p []byte) ([]byte, error) {
	var hb transport.BrokerHeartbeat
	if err := transport.DecodeJSON(p, &hb); err != nil {
		return nil, err
	}
	g, _ := m.fsm.BrokerGroup(hb.Status.Group)
	if _, ok := g.Nodes[hb.Status.ID]; !ok {
		// Not a node we know: its report must not make a group look alive.
		return json.Marshal(transport.HeartbeatReply{Writable: !g.ReadOnly, Unknown: true})
	}
	m.health.record(&hb)
	reply := transport.HeartbeatReply{Writable: !g.ReadOnly, Auth: m.cfg.Auth}
	if apps := m.fsm.Apps(); apps.Version() != hb.AppsVersion {
		reply.Apps = &transport.AppTable{Apps: apps.Apps()}
	}
	return json.Marshal(reply)
}

// Cluster describes every broker group from registrations and heartbeats.
func (m *Server) Cluster() transport.Cluster {
	counts := m.fsm.SubjectCounts()
	c := transport.Cluster{Meta: m.group.Status(), BrokerGroups: []transport.BrokerGroupStatus{}, Subjects: len(m.fsm.Subjects())}
	for _, name := range m.fsm.BrokerGroupNames() {
		g, _ := m.fsm.BrokerGroup(name)
		h := m.health.group(name)
		gs := transport.BrokerGroupStatus{Name: name, Writable: !g.ReadOnly, Available: h.available,
			Leader: h.leader, Term: h.term, Subjects: counts[name], Load: h.load, Nodes: []transport.NodeStatus{}}
		for _, id := range sortedKeys(g.Nodes) {
			n := g.Nodes[id]
			ns := transport.NodeStatus{ID: id, ClientAddr: n.ClientAddr, RaftAddr: n.RaftAddr, HTTPAddr: n.HTTPAddr,
				State: "Unknown", SeenMillis: -1}
			if hb, ok := h.nodes[id]; ok {
				ns.State, ns.Term, ns.AppliedIndex, ns.Backlog = hb.status.State, hb.status.Term, hb.status.AppliedIndex, hb.status.Backlog
				ns.SeenMillis = m.health.age(hb)
				ns.TLS, ns.Insecure, ns.Refusing = hb.status.TLS, hb.status.Insecure, hb.status.Refusing
				if h.leader != "" && h.applied > ns.AppliedIndex {
					ns.Lag = h.applied - ns.AppliedIndex
				}
			}
			gs.Nodes = append(gs.Nodes, ns)
		}
		c.BrokerGroups = append(c.BrokerGroups, gs)
	}
	return c
}
