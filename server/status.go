package server

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/transport"
)

// Status is what /status and the status request report; see
// transport.Status for the fields.
type Status = transport.Status

// Member is one member of the group.
type Member = transport.Member

// Status reports the node's Raft and state-machine position.
func (n *Node) Status() Status {
	s := n.withSnapshot(n.membership())
	s.Backlog, s.ReadOnly = n.fsm.Backlog(), !n.writable.Load()
	s.DiskFull, s.DiskFree = n.disk.full()
	s.ApplyWaiting = n.applyWaiting.Load()
	if err := n.fsm.Stopped(); err != nil {
		s.Stopped = err.Error()
	}
	s.Refusing = n.refusal()
	s.ActiveVersion = n.fsm.ActiveVersion()
	c := brokerConfigOut(n.fsm.BrokerConfig())
	s.BrokerConfig = &c
	return s
}

// membership is the part of Status that Raft knows (state, term, leader,
// members, indexes): what a route or a cluster answer needs. It costs the
// same whatever the state machine holds, where Status's backlog visits
// every subject; a producer asks for a route once per new subject, so
// routes answered from Status cost O(subjects²) for a run over new subjects.
func (n *Node) membership() Status {
	return n.status(n.fsm.Applied(), n.clientAddr)
}

// Delays reports the pending delayed messages of this node's replica.
func (n *Node) Delays() transport.Delays {
	d := n.fsm.Delays()
	out := transport.Delays{BrokerGroup: n.cfg.BrokerGroup, Node: n.cfg.ID, AppliedIndex: n.fsm.Applied(),
		Pending: d.Pending, Hours: []transport.HourPending{}, Subjects: d.Subjects}
	for _, h := range d.Hours {
		out.Hours = append(out.Hours, transport.HourPending{
			Hour: time.UnixMilli(h.Hour * delaywheel.HourMillis).UTC().Format(time.RFC3339), Pending: h.Pending})
	}
	return out
}

// httpLimits bound what a client of the admin HTTP listener can make the
// node hold: a connection that sends its request slowly, reads its answer
// slowly or idles between requests is closed, and request headers are
// bounded in size (net/http allows 4 KiB more than maxHeaderBytes).
type httpLimits struct {
	readHeader     time.Duration // to read a request's headers
	read           time.Duration // to read a whole request
	write          time.Duration // from the end of the request's headers to the end of the answer
	idle           time.Duration // between requests on a kept-alive connection
	maxHeaderBytes int
}

// defaultHTTPLimits suit /status and /metrics: bodiless GETs with small
// headers, scraped every minute or so.
var defaultHTTPLimits = httpLimits{
	readHeader:     5 * time.Second,
	read:           10 * time.Second,
	write:          30 * time.Second,
	idle:           2 * time.Minute,
	maxHeaderBytes: 64 << 10,
}

// serveHTTP serves /status (status's answer as JSON), /metrics and, unless
// ui is nil, the console and its API (everything else) at addr,
// over TLS with tlsConfig unless it is nil. net/http bounds a handshake by
// the least of limits' timeouts, and answers a plaintext request to a TLS
// port with 400.
func serveHTTP(addr string, limits httpLimits, tlsConfig *tls.Config, status func() any, ready func() error, reg *prometheus.Registry, ui http.Handler, log hclog.Logger, goLoop func(func())) (*http.Server, net.Listener, error) {
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
	healthHandlers(mux, ready)
	if ui != nil {
		mux.Handle("/", ui) // the console and its API (package console)
	}
	srv := &http.Server{Handler: mux,
		ReadHeaderTimeout: limits.readHeader, ReadTimeout: limits.read, WriteTimeout: limits.write,
		IdleTimeout: limits.idle, MaxHeaderBytes: limits.maxHeaderBytes,
		ErrorLog: log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})}
	serve := func() error { return srv.Serve(lis) }
	if tlsConfig != nil {
		srv.TLSConfig = tlsConfig
		serve = func() error { return srv.ServeTLS(lis, "", "") }
	}
	goLoop(func() {
		if err := serve(); err != nil && err != http.ErrServerClosed {
			log.Error("http listener stopped", "error", err)
		}
	})
	return srv, lis, nil
}
