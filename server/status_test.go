package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq/transport"
)

// startHTTP runs the admin HTTP listener on a loopback port with limits
// and a fixed status; it stops at cleanup.
func startHTTP(t *testing.T, limits httpLimits, reg *prometheus.Registry) string {
	t.Helper()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var wg sync.WaitGroup
	srv, lis, err := serveHTTP("127.0.0.1:0", limits, nil, func() any { return map[string]string{"state": "Leader"} },
		func() error { return nil }, reg, nil, testLogger(t, "http"), func(fn func()) { wg.Go(fn) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return lis.Addr().String()
}

// TestHTTPClosesSlowRequests: a client that sends half a request header
// and stops is disconnected after the header timeout; a whole request is
// answered; headers over the size limit are refused with 431.
func TestHTTPClosesSlowRequests(t *testing.T) {
	limits := httpLimits{readHeader: 200 * time.Millisecond, read: 5 * time.Second, write: 5 * time.Second,
		idle: 5 * time.Second, maxHeaderBytes: 1 << 10}
	addr := startHTTP(t, limits, nil)

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: qmq\r\nX-Half: "); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("half a request header: the connection stayed open (%v)", err)
	}

	// net/http reads up to 4 KiB past MaxHeaderBytes before it refuses.
	for _, tt := range []struct {
		header int
		want   int
	}{{limits.maxHeaderBytes / 2, http.StatusOK}, {limits.maxHeaderBytes + 8<<10, http.StatusRequestHeaderFieldsTooLarge}} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "GET /status HTTP/1.1\r\nHost: qmq\r\nX-Pad: %s\r\n\r\n", strings.Repeat("a", tt.header))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("header of %d bytes: %v", tt.header, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Fatalf("header of %d bytes: status %d, want %d", tt.header, resp.StatusCode, tt.want)
		}
	}
}

// TestMetricsExportClientListenerLimits: /metrics reports the client
// listener's connections and what its limits refused.
func TestMetricsExportClientListenerLimits(t *testing.T) {
	s := &transport.Server{Handler: func(context.Context, transport.Type, []byte) ([]byte, error) { return nil, nil },
		MaxConnsPerAddr: 1}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() { s.Close(); <-served })
	reg := prometheus.NewRegistry()
	reg.MustRegister(clientListenerMetrics(s)...)
	addr := startHTTP(t, defaultHTTPLimits, reg)

	ctx := context.Background()
	first, err := transport.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if _, err := first.Call(ctx, transport.TypeStatus, nil); err != nil {
		t.Fatal(err)
	}
	second, err := transport.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := second.Call(ctx, transport.TypeStatus, nil); transport.CodeOf(err) != transport.TooManyConnections {
		t.Fatalf("second connection from one address: %v, want TOO_MANY_CONNECTIONS", err)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"qmq_client_connections 1\n",
		`qmq_client_connections_refused_total{limit="per-address"} 1` + "\n",
		`qmq_client_connections_refused_total{limit="total"} 0` + "\n",
		"qmq_client_frame_timeouts_total 0\n",
		"qmq_client_inflight_bytes 0\n",
		"qmq_client_memory_waiters 0\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}
