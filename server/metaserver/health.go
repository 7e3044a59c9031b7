package metaserver

import (
	"sync"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// health is the metaserver leader's soft state: the last heartbeat of
// every broker node. It is never replicated; a new leader starts empty and
// gives each group one timeout to report before calling it unavailable.
type health struct {
	timeout time.Duration
	now     func() time.Time

	mu    sync.Mutex
	since time.Time // when this node started leading
	nodes map[nodeKey]heartbeat
}

type nodeKey struct{ group, id string }

type heartbeat struct {
	status transport.Status
	load   transport.Load
	at     time.Time
}

func newHealth(timeout time.Duration, now func() time.Time) *health {
	return &health{timeout: timeout, now: now, since: now(), nodes: map[nodeKey]heartbeat{}}
}

func (h *health) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since = h.now()
	h.nodes = map[nodeKey]heartbeat{}
}

func (h *health) record(hb *transport.BrokerHeartbeat) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nodes[nodeKey{hb.Status.Group, hb.Status.ID}] = heartbeat{status: hb.Status, load: hb.Load, at: h.now()}
}

// forget drops a node's heartbeat (it left its group).
func (h *health) forget(group, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nodes, nodeKey{group, id})
}

// groupHealth is what the heartbeats say of one group.
type groupHealth struct {
	available  bool
	leader     string // node id
	leaderAddr string
	term       uint64
	applied    uint64 // the leader's applied index at its last heartbeat
	load       transport.Load
	nodes      map[string]heartbeat // fresh or not
}

// group returns the heartbeats of a group's nodes. The group is available
// while a node that calls itself leader has reported within the timeout —
// or, until one timeout after this node began leading, when none has yet.
func (h *health) group(name string) groupHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	g := groupHealth{nodes: map[string]heartbeat{}}
	for k, hb := range h.nodes {
		if k.group != name {
			continue
		}
		g.nodes[k.id] = hb
		fresh := now.Sub(hb.at) < h.timeout
		if fresh && hb.status.State == "Leader" && hb.status.Term >= g.term {
			g.available, g.leader, g.leaderAddr, g.term = true, k.id, hb.status.ClientAddr, hb.status.Term
			g.applied, g.load = hb.status.AppliedIndex, hb.load
		}
	}
	if !g.available && now.Sub(h.since) < h.timeout {
		g.available = true // no news yet: assume the best until the first timeout
	}
	return g
}

// age returns how long ago a heartbeat arrived, in milliseconds.
func (h *health) age(hb heartbeat) int64 { return h.now().Sub(hb.at).Milliseconds() }
