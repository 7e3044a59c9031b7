package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"sync"
)

// loopbackIP is the address the test servers listen on and their
// certificates are valid for.
var loopbackIP = net.IPv4(127, 0, 0, 1)

// newTestCA makes a CA for a test.
func newTestCA(t *testing.T) *tlsconf.CA {
	t.Helper()
	ca, err := tlsconf.NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// loadTLS writes trusted's certificate and, unless spec.CN is "", a
// certificate of ca for spec, and loads them.
func loadTLS(t *testing.T, trusted, ca *tlsconf.CA, spec tlsconf.Spec) *tlsconf.Reloader {
	t.Helper()
	dir := t.TempDir()
	f := tlsconf.Files{CA: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(f.CA, trusted.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if spec.CN != "" {
		cert, key, err := ca.Issue(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlsconf.WriteFiles(dir, spec.CN, cert, key, false); err != nil {
			t.Fatal(err)
		}
		f.Cert, f.Key = filepath.Join(dir, spec.CN+".pem"), filepath.Join(dir, spec.CN+"-key.pem")
	}
	r, err := tlsconf.Load(f, tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nodeSpec is a node certificate valid on loopbackIP.
func nodeSpec(cn string) tlsconf.Spec {
	return tlsconf.Spec{CN: cn, IPs: []net.IP{loopbackIP}, Node: true}
}

// tlsServer is a Server of an echo handler with a node certificate of ca,
// asking clients for auth.
func tlsServer(t *testing.T, ca *tlsconf.CA, auth tlsconf.ClientAuth) *Server {
	return &Server{Handler: echo, TLS: loadTLS(t, ca, ca, nodeSpec("n1")).Server(auth, false)}
}

// dialerOf dials TLS with r's files.
func dialerOf(r *tlsconf.Reloader) Dialer { return Dialer{TLS: r.Client} }

// callOnce dials addr with d and makes one echo call.
func callOnce(t *testing.T, d Dialer, addr string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	b, err := c.Call(ctx, TypeStatus, []byte("ping"))
	if err == nil && string(b) != "ping" {
		t.Fatalf("echo answered %q", b)
	}
	return err
}

// TestTLSClientAuth: a client is served or refused as the server's client
// auth mode says; a certificate the server refuses fails the client's
// first call with ErrTLS (in TLS 1.3 the client's handshake has already
// returned), and so does a server the client does not trust, at the dial.
func TestTLSClientAuth(t *testing.T) {
	caA, caB := newTestCA(t), newTestCA(t)
	clientA := dialerOf(loadTLS(t, caA, caA, tlsconf.Spec{CN: "app"}))
	nodeA := dialerOf(loadTLS(t, caA, caA, nodeSpec("n2")))
	noCert := dialerOf(loadTLS(t, caA, nil, tlsconf.Spec{}))
	foreignCert := dialerOf(loadTLS(t, caA, caB, tlsconf.Spec{CN: "app"})) // trusts A, certified by B
	trustsB := dialerOf(loadTLS(t, caB, caB, tlsconf.Spec{CN: "app"}))
	for _, tc := range []struct {
		name   string
		auth   tlsconf.ClientAuth
		client Dialer
		ok     bool
	}{
		{"require, a client of the CA", tlsconf.Require, clientA, true},
		{"require, a node of the CA", tlsconf.Require, nodeA, true},
		{"require, another CA's certificate", tlsconf.Require, foreignCert, false},
		{"require, no certificate", tlsconf.Require, noCert, false},
		{"request, no certificate", tlsconf.Request, noCert, true},
		{"request, another CA's certificate", tlsconf.Request, foreignCert, false},
		{"none, no certificate", tlsconf.None, noCert, true},
		{"none, a server certified by another CA", tlsconf.None, trustsB, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tlsServer(t, caA, tc.auth)
			addr := serve(t, s, nil)
			err := callOnce(t, tc.client, addr)
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrTLS) {
				t.Fatalf("got %v, want ErrTLS", err)
			}
			if !tc.ok {
				eventually(t, "the failed handshake counted", func() bool { return s.Stats().HandshakesFailed == 1 })
			}
			eventually(t, "the connection forgotten", func() bool { return s.Stats().Conns == 0 })
		})
	}
}

// TestTLSServerNameIsTheDialledHost: a certificate valid for 127.0.0.1
// does not verify for a server dialled at 127.0.0.2.
func TestTLSServerNameIsTheDialledHost(t *testing.T) {
	ca := newTestCA(t)
	lis, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, tlsServer(t, ca, tlsconf.None), lis)
	err = callOnce(t, dialerOf(loadTLS(t, ca, nil, tlsconf.Spec{})), addr)
	if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), "127.0.0.2") {
		t.Fatalf("got %v, want ErrTLS naming 127.0.0.2", err)
	}
}

// TestTLSPlaintextClient: a client without TLS is answered INVALID, naming
// TLS, on its first call, rather than left waiting.
func TestTLSPlaintextClient(t *testing.T) {
	s := tlsServer(t, newTestCA(t), tlsconf.None)
	addr := serve(t, s, nil)
	err := callOnce(t, Dialer{}, addr)
	if CodeOf(err) != Invalid || !strings.Contains(err.Error(), "requires TLS") {
		t.Fatalf("got %v, want INVALID saying the port requires TLS", err)
	}
	if st := s.Stats(); st.HandshakesFailed != 1 {
		t.Fatalf("HandshakesFailed = %d, want 1", st.HandshakesFailed)
	}
}

// TestTLSClientOfPlaintextServer: a TLS client of a server without TLS
// gets ErrTLS at the dial.
func TestTLSClientOfPlaintextServer(t *testing.T) {
	ca := newTestCA(t)
	addr := serve(t, &Server{Handler: echo}, nil)
	if err := callOnce(t, dialerOf(loadTLS(t, ca, ca, tlsconf.Spec{CN: "app"})), addr); !errors.Is(err, ErrTLS) {
		t.Fatalf("got %v, want ErrTLS", err)
	}
}

// TestTLSGroupClientGivesUpAtOnce: LeaderClient.Call returns ErrTLS, not
// its context's end after retrying, both for a server it does not trust
// (the dial fails) and for its own certificate refused (the first read
// fails).
func TestTLSGroupClientGivesUpAtOnce(t *testing.T) {
	caA, caB := newTestCA(t), newTestCA(t)
	addr := serve(t, tlsServer(t, caA, tlsconf.Require), nil)
	for name, d := range map[string]Dialer{
		"server not trusted":  dialerOf(loadTLS(t, caB, caB, tlsconf.Spec{CN: "app"})),
		"certificate refused": dialerOf(loadTLS(t, caA, caB, tlsconf.Spec{CN: "app"})),
	} {
		t.Run(name, func(t *testing.T) {
			gc, err := d.NewLeaderClient([]string{addr})
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = gc.Call(ctx, TypeStatus, nil)
			if !errors.Is(err, ErrTLS) || ctx.Err() != nil {
				t.Fatalf("got %v (context: %v), want ErrTLS before the context ends", err, ctx.Err())
			}
		})
	}
	// The same LeaderClient code with a trusted certificate is served.
	gc, err := dialerOf(loadTLS(t, caA, caA, tlsconf.Spec{CN: "app"})).NewLeaderClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if b, err := gc.Call(context.Background(), TypeStatus, []byte("x")); err != nil || string(b) != "x" {
		t.Fatalf("trusted client: %q, %v", b, err)
	}
}

// TestTLSHandshakeTimeout: a connection that never starts its handshake
// is closed after HandshakeTimeout, and its MaxConnsPerAddr slot returns.
func TestTLSHandshakeTimeout(t *testing.T) {
	ca := newTestCA(t)
	s := tlsServer(t, ca, tlsconf.None)
	s.MaxConnsPerAddr, s.HandshakeTimeout = 1, 100*time.Millisecond
	addr := serve(t, s, nil)
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := silent.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("silent connection read %d bytes, %v; want it closed", n, err)
	}
	eventually(t, "the slot returned", func() bool { st := s.Stats(); return st.Conns == 0 && st.HandshakesFailed == 1 })
	if err := callOnce(t, dialerOf(loadTLS(t, ca, nil, tlsconf.Spec{})), addr); err != nil {
		t.Fatalf("after the silent connection was closed: %v", err)
	}
}

// TestTLSConnectionLimitsBoundHandshakes: a connection still in its
// handshake holds its MaxConnsPerAddr slot; at the limit a TLS client is
// answered TOO_MANY_CONNECTIONS over TLS, and served once the slot is
// free.
func TestTLSConnectionLimitsBoundHandshakes(t *testing.T) {
	ca := newTestCA(t)
	s := tlsServer(t, ca, tlsconf.None)
	s.MaxConnsPerAddr, s.HandshakeTimeout = 1, time.Hour
	addr := serve(t, s, nil)
	client := dialerOf(loadTLS(t, ca, nil, tlsconf.Spec{}))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the silent connection admitted", func() bool { return s.Stats().Conns == 1 })
	if err := callOnce(t, client, addr); CodeOf(err) != TooManyConnections {
		t.Fatalf("over the limit: %v, want TOO_MANY_CONNECTIONS", err)
	}
	if st := s.Stats(); st.RefusedPerAddr != 1 || st.HandshakesFailed != 0 {
		t.Fatalf("refused per address %d, handshakes failed %d; want 1, 0", st.RefusedPerAddr, st.HandshakesFailed)
	}
	silent.Close()
	eventually(t, "the silent connection forgotten", func() bool { return s.Stats().Conns == 0 })
	if err := callOnce(t, client, addr); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

// TestTLSFailedHandshakesLogOncePerSecond: a client failing its handshake
// in a loop does not write a line per attempt; every failure is still
// counted, and the next line says how many were held back.
func TestTLSFailedHandshakesLogOncePerSecond(t *testing.T) {
	caA, caB := newTestCA(t), newTestCA(t)
	var logs lockedLog
	s := tlsServer(t, caA, tlsconf.Require)
	s.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	addr := serve(t, s, nil)
	foreign := dialerOf(loadTLS(t, caA, caB, tlsconf.Spec{CN: "app"}))
	const attempts = 20
	start := time.Now()
	for range attempts {
		if err := callOnce(t, foreign, addr); !errors.Is(err, ErrTLS) {
			t.Fatalf("got %v, want ErrTLS", err)
		}
	}
	eventually(t, "every failed handshake counted", func() bool { return s.Stats().HandshakesFailed == attempts })
	lines := strings.Count(logs.String(), "tls handshake failed")
	if most := int(time.Since(start)/time.Second) + 1; lines < 1 || lines > most {
		t.Fatalf("%d lines for %d failed handshakes within %v, want 1 to %d", lines, attempts, time.Since(start), most)
	}
}

// lockedLog is a log output safe for the server's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
