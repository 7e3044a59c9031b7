package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
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
	s := n.status(n.fsm.Applied(), n.clientAddr)
	s.Backlog, s.ReadOnly = n.fsm.Backlog(), !n.writable.Load()
	return s
}

// serveHTTP serves /status (status's answer as JSON) and /metrics at addr.
func serveHTTP(addr string, status func() any, reg *prometheus.Registry, log hclog.Logger, goLoop func(func())) (*http.Server, net.Listener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("server: listen for http: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(status())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux}
	goLoop(func() {
		if err := srv.Serve(lis); err != nil && err != http.ErrServerClosed {
			log.Error("http listener stopped", "error", err)
		}
	})
	return srv, lis, nil
}
