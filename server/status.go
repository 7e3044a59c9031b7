package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qmqgo/qmq/transport"
)

// Status is what /status and the status request report; see
// transport.Status for the fields.
type Status = transport.Status

// Member is one member of the group.
type Member = transport.Member

// Status reports the node's Raft and state-machine position.
func (n *Node) Status() Status {
	stats := n.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return v }
	_, leaderID := n.raft.LeaderWithID()
	s := Status{
		ID: n.cfg.ID, Group: n.cfg.Group, State: n.raft.State().String(),
		Leader: string(leaderID), Term: num("term"), CommitIndex: num("commit_index"),
		AppliedIndex: n.fsm.Applied(), LastIndex: n.raft.LastIndex(),
		ClientAddr: n.clientAddr, RaftAddr: string(n.trans.LocalAddr()),
	}
	if leaderID != "" {
		s.LeaderAddr = n.fsm.MemberAddr(string(leaderID))
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			s.Members = append(s.Members, Member{ID: string(srv.ID), RaftAddr: string(srv.Address),
				ClientAddr: n.fsm.MemberAddr(string(srv.ID)), Suffrage: srv.Suffrage.String()})
		}
	}
	return s
}

func (n *Node) serveHTTP() error {
	lis, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("server: listen for http: %w", err)
	}
	n.httpLis = lis
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(n.Status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.metrics.registry, promhttp.HandlerOpts{}))
	n.httpSrv = &http.Server{Handler: mux}
	n.goLoop(func() {
		if err := n.httpSrv.Serve(lis); err != nil && err != http.ErrServerClosed {
			n.log.Error("http listener stopped", "error", err)
		}
	})
	return nil
}
