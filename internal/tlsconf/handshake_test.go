package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/poll"
)

// testServer accepts TLS connections on loopback; each that completes its
// handshake gets one byte and is closed. Every handshake's outcome goes
// to results.
type testServer struct {
	addr    string
	results chan error
}

func serve(t *testing.T, cfg *tls.Config) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(loopback.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{addr: lis.Addr().String(), results: make(chan error, 64)}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				tc := tls.Server(c, cfg)
				err := tc.HandshakeContext(ctx)
				if err == nil {
					_, err = tc.Write([]byte{'k'})
				}
				s.results <- err
			}()
		}
	}()
	return s
}

// dial connects with cfg and reads the server's byte: with TLS 1.3 a
// server refusing the client's certificate says so only then. It returns
// the server's certificate and what the server made of the handshake.
func (s *testServer) dial(t *testing.T, cfg *tls.Config) (*x509.Certificate, error, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, err, <-s.results
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 1)
	_, err = io.ReadFull(tc, b)
	return tc.ConnectionState().PeerCertificates[0], err, <-s.results
}

func TestHandshakes(t *testing.T) {
	caA, caB := newCA(t), newCA(t)
	srv, err := Load(writeSet(t, t.TempDir(), caA, nodeSpec("n1")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	client := func(f Files) *tls.Config {
		r, err := Load(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Client()
	}
	nodeA := client(writeSet(t, t.TempDir(), caA, nodeSpec("n2")))
	appA := client(writeSet(t, t.TempDir(), caA, Spec{CN: "app"}))
	caOnlyA := client(Files{CA: writeSet(t, t.TempDir(), caA, Spec{CN: "app"}).CA})
	nodeB := client(writeSet(t, t.TempDir(), caB, nodeSpec("n3")))
	// A certificate of B presented to a server of A, trusting A.
	foreignCert := nodeB.Clone()
	foreignCert.RootCAs = nodeA.RootCAs

	for _, tc := range []struct {
		name      string
		auth      ClientAuth
		nodesOnly bool
		client    *tls.Config
		ok        bool
		serverErr error // what the server's error must match, if refused
	}{
		{"a node of the same CA", Require, false, nodeA, true, nil},
		{"a client of the same CA", Require, false, appA, true, nil},
		{"a client of another CA", Require, false, foreignCert, false, nil},
		{"a client that trusts another CA", Require, false, nodeB, false, nil},
		{"no client certificate, require", Require, false, caOnlyA, false, nil},
		{"no client certificate, request", Request, false, caOnlyA, true, nil},
		{"another CA's certificate, request", Request, false, foreignCert, false, nil},
		{"no client certificate, none", None, false, caOnlyA, true, nil},
		{"a node to a nodes-only server", None, true, nodeA, true, nil},
		{"a client-only certificate to a nodes-only server", None, true, appA, false, ErrNotNode},
		{"no certificate to a nodes-only server", Request, true, caOnlyA, false, nil},
		{"another CA's node to a nodes-only server", Require, true, foreignCert, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, srv.Server(tc.auth, tc.nodesOnly))
			_, clientErr, serverErr := s.dial(t, tc.client)
			if tc.ok && (clientErr != nil || serverErr != nil) {
				t.Fatalf("refused: client %v, server %v", clientErr, serverErr)
			}
			if !tc.ok && (clientErr == nil || serverErr == nil) {
				t.Fatalf("accepted: client %v, server %v", clientErr, serverErr)
			}
			if tc.serverErr != nil && !errors.Is(serverErr, tc.serverErr) {
				t.Fatalf("server refused with %v, want %v", serverErr, tc.serverErr)
			}
		})
	}
}

func TestHandshakeSeesRotatedFiles(t *testing.T) {
	caA, caB := newCA(t), newCA(t)
	dir := t.TempDir()
	var w warnings
	srv, err := Load(writeSet(t, dir, caA, nodeSpec("n1")), Options{CheckEvery: time.Millisecond, Warn: w.warn})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Load(writeSet(t, t.TempDir(), caA, nodeSpec("n2")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := serve(t, srv.Server(Require, true))
	serial := func() *big.Int {
		cert, clientErr, serverErr := s.dial(t, cli.Client())
		if clientErr != nil || serverErr != nil {
			t.Fatalf("handshake: client %v, server %v", clientErr, serverErr)
		}
		return cert.SerialNumber
	}
	old := serial()

	// The node's certificate, rotated by rename.
	cert, key := issue(t, caA, nodeSpec("n1"))
	if err := WriteFiles(dir, "n1", cert, key, true); err != nil {
		t.Fatal(err)
	}
	want := parseLeaf(t, cert).SerialNumber
	poll.Until(t, 10*time.Second, "a handshake with the new certificate", func() bool {
		return serial().Cmp(want) == 0
	})
	if want.Cmp(old) == 0 {
		t.Fatal("the new certificate has the old serial")
	}

	// The CA bundle gains B: a node of B is now let in.
	nodeB, err := Load(writeSet(t, t.TempDir(), caB, nodeSpec("n3")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	foreign := nodeB.Client()
	foreign.RootCAs = cli.Client().RootCAs
	if _, clientErr, _ := s.dial(t, foreign); clientErr == nil {
		t.Fatal("a node of B was let in before the CA file named B")
	}
	writeCA(t, dir, caA, caB)
	poll.Until(t, 10*time.Second, "a node of B let in by the reloaded CA", func() bool {
		_, clientErr, serverErr := s.dial(t, foreign)
		return clientErr == nil && serverErr == nil
	})
	if w.count() != 0 {
		t.Fatalf("warned on good rotations: %v", w.msgs)
	}
}
