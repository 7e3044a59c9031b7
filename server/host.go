package server

import (
	"context"
	"fmt"
	"github.com/qmqgo/qmq/console"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq/transport"
)

// host is what a broker node and a metaserver node run besides Raft: the
// client listener, the admin HTTP listener, the node's goroutines, and its
// life from start to Close.
type host struct {
	hlog       hclog.Logger
	clientAddr string // advertised to clients
	// filesReserved is how many descriptors the node keeps for itself
	// (segment files, Raft); client connections get the rest.
	filesReserved int
	// tls is the node's certificate, shared by its listeners and its
	// dials; nil when it has none (plaintext).
	tls *nodeTLS

	client    *transport.Server
	clientLis net.Listener
	httpSrv   *http.Server
	httpLis   net.Listener

	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Mutex
	closed  bool
}

func newHost(log hclog.Logger) host {
	ctx, cancel := context.WithCancel(context.Background())
	return host{hlog: log, ctx: ctx, cancel: cancel}
}

// listen loads the node's TLS files, creates the data directory and opens
// the client listener; advertise ("" for the address listened on) is the
// address handed out.
func (h *host) listen(dataDir, clientAddr, advertise string, tlsc TLSConfig) error {
	var err error
	if h.tls, err = loadTLS(tlsc, h.hlog.Named("tls").Warn); err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("server: create data directory: %w", err)
	}
	if h.clientLis, err = net.Listen("tcp", clientAddr); err != nil {
		return fmt.Errorf("server: listen for clients: %w", err)
	}
	h.clientAddr = advertise
	if h.clientAddr == "" {
		h.clientAddr = h.clientLis.Addr().String()
	}
	return nil
}

// serve answers client requests with handler behind g, and /status,
// /metrics, /healthz, /readyz (ready), the console and its API at httpAddr unless it is "": both over TLS, with the one
// certificate, when the node has TLS files. The HTTP port asks what the
// client port asks of clients' certificates, but with the guard on it
// requires one, unless openHTTP.
func (h *host) serve(handler transport.Handler, g *guard, limits ClientLimits, httpAddr string, openHTTP bool, status func() any, ready func() error, reg *prometheus.Registry) error {
	limits.Conns = fitConns(limits.Conns, h.filesReserved, h.hlog)
	h.client = &transport.Server{Handler: g.wrap(handler), Logger: h.hlog.Named("client"),
		MaxInFlightBytes: limits.Memory, MaxConnsPerAddr: limits.ConnsPerAddr, MaxConns: limits.Conns, MaxInFlight: limits.RequestsPerConn,
		TLS: h.tls.clientServer()}
	if g.on {
		h.client.Identified, h.client.IdentifyTimeout = identified, helloTimeout
	}
	reg.MustRegister(clientListenerMetrics(h.client)...)
	if h.tls != nil {
		// The certificate in use, reloaded or not: what an alert on its
		// expiry must read.
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "qmq_tls_certificate_expiry_timestamp_seconds",
			Help: "When the node's certificate (the one it serves now) expires, Unix seconds."},
			func() float64 {
				if leaf := h.tls.files.Leaf(); leaf != nil {
					return float64(leaf.NotAfter.Unix())
				}
				return 0
			}))
	}
	h.goLoop(func() {
		if err := h.client.Serve(h.clientLis); err != nil {
			h.hlog.Error("client listener stopped", "error", err)
		}
	})
	if httpAddr == "" {
		return nil
	}
	// The console and its API talk to the cluster through this node's
	// client port as the caller's application, never as the node: they
	// present no node certificate (consoleConn).
	ui, err := console.New(console.Config{Servers: []string{h.clientAddr}, ConnOptions: h.tls.consoleConn(),
		Auth: g.on, TLS: h.tls != nil, Logger: h.hlog.Named("console")})
	if err != nil {
		return err
	}
	h.httpSrv, h.httpLis, err = serveHTTP(httpAddr, defaultHTTPLimits, h.tls.httpServer(g.on, openHTTP), status, ready, reg, ui, h.hlog, h.goLoop)
	return err
}

// goLoop runs fn on a goroutine that Close waits for.
func (h *host) goLoop(fn func()) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// dialer is how the node dials other nodes' client ports: with its
// certificate, from source if it is set (NodeConfig.SourceIP, checked).
func (h *host) dialer(source string) transport.Dialer {
	d := h.tls.dialer()
	d.Source = net.ParseIP(source)
	return d
}

// ClientAddr returns the address clients should use for this node.
func (h *host) ClientAddr() string { return h.clientAddr }

// HTTPAddr returns the admin listener's address, or "".
func (h *host) HTTPAddr() string {
	if h.httpLis == nil {
		return ""
	}
	return h.httpLis.Addr().String()
}

// beginClose marks the node closing, cancels its context and stops its
// listeners; it returns false if the node was closed already. The caller
// holds closeMu.
func (h *host) beginClose() bool {
	if h.closed {
		return false
	}
	h.closed = true
	h.cancel()
	if h.client != nil {
		h.client.Close()
	} else if h.clientLis != nil {
		h.clientLis.Close()
	}
	if h.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		h.httpSrv.Shutdown(ctx)
		cancel()
	}
	return true
}
