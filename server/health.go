package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/hashicorp/raft"
)

// Health, for orchestrators: /healthz answers 200 while the process
// serves HTTP at all (a liveness probe: restart it if not); /readyz
// answers 200 only while the node, by its own view, can serve its
// group's traffic, and 503 with the reason otherwise (a readiness probe:
// send it no traffic, count it as down for a disruption budget). Neither
// reads the state machine's contents: both cost the same on any node.

// maxReadyLag is how many committed entries a node may have yet to apply
// and still be ready: a follower always trails its leader a little.
const maxReadyLag = 1024

// errNotVoter: the node is not (yet) a voter of its group's configuration
// (it was never joined, or it was removed).
var errNotVoter = errors.New("not a voter of its group")

// readiness says why the node is not ready, nil when it is: a voter of a
// group that has a leader, its state machine applying (stopped is what
// it says of itself), and no more than maxReadyLag entries behind what it
// knows to be committed.
func (g *raftGroup) readiness(applied uint64, stopped error) error {
	if stopped != nil {
		return fmt.Errorf("the state machine stopped: %w", stopped)
	}
	voter := false
	if f := g.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if string(srv.ID) == g.id {
				voter = srv.Suffrage == raft.Voter
			}
		}
	}
	if !voter {
		return fmt.Errorf("%s: %w %s (qmqctl join adds it)", g.id, errNotVoter, g.group)
	}
	if _, leader := g.raft.LeaderWithID(); leader == "" {
		return fmt.Errorf("group %s has no leader", g.group)
	}
	commit, _ := strconv.ParseUint(g.raft.Stats()["commit_index"], 10, 64)
	if commit > applied+maxReadyLag {
		return fmt.Errorf("applied index %d is %d behind the commit index %d", applied, commit-applied, commit)
	}
	return nil
}

// healthHandlers adds /healthz and /readyz to mux.
func healthHandlers(mux *http.ServeMux, ready func() error) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		w.Write([]byte("ready\n"))
	})
}

// ready is the broker node's readiness (readiness).
func (n *Node) ready() error { return n.readiness(n.fsm.Applied(), n.fsm.Stopped()) }

// ready is the metaserver node's readiness (readiness).
func (m *MetaNode) ready() error { return m.readiness(m.fsm.Applied(), nil) }
