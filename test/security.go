package test

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// Security is a test's certificate authority and the certificates it
// issued, as `qmqctl tls init` writes them, in a directory of the test's:
//
//	DIR/ca.pem, ca-key.pem               the CA every node and client trusts
//	DIR/operator.pem, operator-key.pem   a node certificate, as an operator holds one
//	DIR/client.pem, client-key.pem       a client certificate (clientAuth only)
//	DIR/GROUP-ID.pem, GROUP-ID-key.pem   each node's (Cluster.UseTLS)
//
// A Cluster given one (UseTLS) starts every node with its own node
// certificate and --tls-client-auth request, runs qmqctl and reads
// /status with the operator's certificate. SDK clients connect with
// ConnOption (the client certificate, as an application would), the
// harness's own dials and operations with Dialer and OperatorConnOption
// (the operator's). How every node is started and how every client
// connects is decided here: NodeArgs, CtlArgs, ConnOption,
// OperatorConnOption and Dialer.
//
// Every method works on a nil *Security and then means plaintext: no
// flags, the zero ConnOption and transport.Dialer, plain HTTP.
type Security struct {
	t   testing.TB
	dir string
	ca  *tlsconf.CA

	// Operator is a node certificate (serverAuth and clientAuth), with
	// which qmqctl, the /status reads and the fault helpers connect: an
	// operator holding one may do everything.
	Operator qmq.TLSFiles
	// Client is a client certificate (clientAuth only), with which the
	// SDK clients of ConnOption connect.
	Client qmq.TLSFiles

	operator *tlsconf.Reloader // Operator's files, for Dialer and the HTTP client

	auth        bool   // nodes check applications (UseAuth)
	app, secret string // what ConnOption's clients work as (CreateApp)
}

// UseAuth makes every node started from now on check applications
// (qmqd --auth). SDK clients then need an application: CreateApp.
func (s *Security) UseAuth() *Security {
	s.auth = true
	return s
}

// CreateApp creates an application with admin (which must connect as the
// operator) and makes ConnOption's clients work as it.
func (s *Security) CreateApp(ctx context.Context, adm *admin.Client, spec admin.AppSpec) {
	s.t.Helper()
	secret, err := adm.CreateApp(ctx, spec)
	if err != nil {
		s.t.Fatalf("security: creating application %s: %v", spec.Code, err)
	}
	s.app, s.secret = spec.Code, secret
}

// nodeClientAuth is what every node of a cluster with TLS asks of client
// certificates (qmqd --tls-client-auth): checked if presented.
const nodeClientAuth = "request"

// NewSecurity makes a CA in a temporary directory of t's and issues the
// operator's and the client's certificates.
func NewSecurity(t testing.TB) *Security {
	t.Helper()
	ca, err := tlsconf.NewCA("qmq test CA", 0)
	if err != nil {
		t.Fatalf("security: %v", err)
	}
	s := &Security{t: t, dir: t.TempDir(), ca: ca}
	if err := ca.Write(s.dir); err != nil {
		t.Fatalf("security: %v", err)
	}
	// The operator's is a node certificate, which needs an address: it is
	// never served, so loopback's will do.
	s.Operator = s.issue("operator", tlsconf.Spec{CN: "operator", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: true})
	s.Client = s.issue("client", tlsconf.Spec{CN: "client"})
	if s.operator, err = tlsconf.Load(tlsconf.Files(s.Operator), tlsconf.Options{}); err != nil {
		t.Fatalf("security: loading the operator's certificate: %v", err)
	}
	return s
}

// issue writes a new certificate of spec as name.pem and its key, and
// returns their files.
func (s *Security) issue(name string, spec tlsconf.Spec) qmq.TLSFiles {
	s.t.Helper()
	cert, key, err := s.ca.Issue(spec)
	if err != nil {
		s.t.Fatalf("security: issuing %s: %v", name, err)
	}
	if err := tlsconf.WriteFiles(s.dir, name, cert, key, false); err != nil {
		s.t.Fatalf("security: %v", err)
	}
	return qmq.TLSFiles{CA: filepath.Join(s.dir, "ca.pem"),
		Cert: filepath.Join(s.dir, name+".pem"), Key: filepath.Join(s.dir, name+"-key.pem")}
}

// NodeCert issues a node certificate named name (a file name) for the
// IPs of addrs, each an IP or a host:port, and returns its files.
func (s *Security) NodeCert(name string, addrs ...string) qmq.TLSFiles {
	s.t.Helper()
	var ips []net.IP
	for _, a := range addrs {
		host := a
		if h, _, err := net.SplitHostPort(a); err == nil {
			host = h
		}
		ip := net.ParseIP(host)
		if ip == nil {
			s.t.Fatalf("security: node certificate %s: %q is not an IP address", name, a)
		}
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	return s.issue(name, tlsconf.Spec{CN: name, IPs: ips, Node: true})
}

// NodeArgs are the qmqd flags of a node serving with files: TLS only on
// every port, client certificates checked if presented.
func (s *Security) NodeArgs(files qmq.TLSFiles) []string {
	if s == nil {
		return nil
	}
	args := []string{"--tls-cert", files.Cert, "--tls-key", files.Key, "--tls-ca", files.CA, "--tls-client-auth", nodeClientAuth}
	if s.auth {
		args = append(args, "--auth")
	}
	return args
}

// CtlArgs are qmqctl's global flags (given before the command) to connect
// as the operator.
func (s *Security) CtlArgs() []string {
	if s == nil {
		return nil
	}
	return []string{"--tls-ca", s.Operator.CA, "--tls-cert", s.Operator.Cert, "--tls-key", s.Operator.Key}
}

// ConnOption is how an SDK client of the test connects (producers,
// consumers): over TLS with the client certificate, as the application
// CreateApp made if any.
func (s *Security) ConnOption() qmq.ConnOption {
	if s == nil {
		return qmq.ConnOption{}
	}
	o := qmq.WithTLS(s.Client)
	if s.app != "" {
		o = o.And(qmq.WithApp(s.app, s.secret))
	}
	return o
}

// OperatorConnOption is how the test's admin.Client connects: over TLS with the
// operator's node certificate.
func (s *Security) OperatorConnOption() qmq.ConnOption {
	if s == nil {
		return qmq.ConnOption{}
	}
	return qmq.WithTLS(s.Operator)
}

// Dialer is how the harness dials nodes itself (a time request, probe
// sends): over TLS with the operator's node certificate.
func (s *Security) Dialer() transport.Dialer {
	if s == nil {
		return transport.Dialer{}
	}
	return transport.Dialer{TLS: s.operator.Client}
}

// httpClient reads the nodes' /status: over https with the operator's
// certificate, or plain HTTP.
func (s *Security) httpClient() *http.Client {
	c := &http.Client{Timeout: 2 * time.Second}
	if s != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = s.operator.Client()
		c.Transport = tr
	}
	return c
}

// scheme is the nodes' HTTP scheme: https with TLS.
func (s *Security) scheme() string {
	if s == nil {
		return "http"
	}
	return "https"
}
