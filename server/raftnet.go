package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/lograte"
	"github.com/qmqgo/qmq/internal/tlsconf"
)

// raftHandshakeTimeout bounds the TLS handshake of an accepted Raft
// connection.
const raftHandshakeTimeout = 10 * time.Second

// raftStream is the Raft transport's stream layer: TCP like raft's own,
// but a node listening on a specific IP also dials its peers from that IP.
// Peers, and any proxy between them, then see which node a connection
// comes from; a node on a multi-homed host talks to its group from the one
// address it was given. With TLS files, every connection is TLS and each
// side must present a node certificate of the CA.
type raftStream struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
	tls       *tlsconf.Reloader // nil: plaintext
	server    *tls.Config       // tls's nodes-only server config
	log       hclog.Logger
	refusals  *lograte.Limiter // a peer refused in a loop logs once a second
	lastIP    sync.Map         // a peer's name → the IP it led to at the last dial that connected
}

func (s *raftStream) Addr() net.Addr { return s.advertise }

// hostAddr is a Raft address by DNS name. The group records the name, not
// what it resolves to now, and each dial resolves it again: a node whose
// IP changes under a stable name (a Kubernetes pod rescheduled behind its
// headless service) is found at its new IP with nothing run.
type hostAddr string

func (hostAddr) Network() string  { return "tcp" }
func (a hostAddr) String() string { return string(a) }

// raftAdvertise checks the address a node's group records for it: HOST:PORT
// with a port, and a host its peers can dial: an IP address other than the
// unspecified one (an IPv6 one with its zone), or a DNS name, kept as a
// name, in lower case and without a trailing dot, so that one node is one
// address however its name was typed. A name whose last label is all
// digits is refused: resolvers differ on whether it is an IP address.
func raftAdvertise(addr string) (net.Addr, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("server: raft address: %w", err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return nil, fmt.Errorf("server: raft address %s: the port must be a number from 1 to 65535", addr)
	}
	ipPart, zone, _ := strings.Cut(host, "%")
	if ip := net.ParseIP(ipPart); ip != nil {
		if ip.IsUnspecified() || (zone != "" && ip.To4() != nil) {
			return nil, fmt.Errorf("server: raft address %s: give an IP address or a DNS name the other members can dial", addr)
		}
		return &net.TCPAddr{IP: ip, Port: int(n), Zone: zone}, nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if !dnsName(name) {
		return nil, fmt.Errorf("server: raft address %s: %q is neither an IP address nor a DNS name; give one the other members can dial", addr, host)
	}
	if last := name[strings.LastIndexByte(name, '.')+1:]; strings.Trim(last, "0123456789") == "" {
		return nil, fmt.Errorf("server: raft address %s: %q is not an IP address, and a name's last label cannot be all digits", addr, host)
	}
	return hostAddr(net.JoinHostPort(name, port)), nil
}

// ipHost reports whether the host of a Raft address is an IP address (an
// IPv6 one possibly with its zone), not a name.
func ipHost(host string) bool {
	ip, _, _ := strings.Cut(host, "%")
	return net.ParseIP(ip) != nil
}

// dnsName reports whether host is a DNS name: at most 253 bytes of dot-
// separated labels of 1 to 63 letters, digits and hyphens, none starting
// or ending with a hyphen (a trailing dot allowed).
func dnsName(host string) bool {
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Dial connects to a peer; over TLS, the handshake is done within
// timeout too, with the node's current certificate. A peer recorded by
// name is resolved at each dial; when the name cannot be resolved (the
// resolver down, not the name gone: a *net.DNSError), the peer is dialled
// at the IP its name last led to, still checked over TLS against the name,
// so that an outage of DNS does not cut a group's links as they reconnect.
func (s *raftStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.dial(string(addr), "", timeout)
	host, port, _ := net.SplitHostPort(string(addr))
	if ipHost(host) {
		return c, err
	}
	if err == nil {
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			s.lastIP.Store(host, ta.IP.String())
		}
		return c, nil
	}
	var dnsErr *net.DNSError
	last, ok := s.lastIP.Load(host)
	if !errors.As(err, &dnsErr) || !ok {
		return nil, err
	}
	return s.dial(net.JoinHostPort(last.(string), port), host, timeout)
}

// dial connects to addr; over TLS the server's certificate is checked
// against name, or addr's host when name is empty.
func (s *raftStream) dial(addr, name string, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	if s.tls == nil {
		return d.Dial("tcp", addr)
	}
	cfg := s.tls.Client()
	cfg.ServerName = name
	return (&tls.Dialer{NetDialer: &d, Config: cfg}).Dial("tcp", addr)
}

// Accept returns the next connection. Over TLS it does not handshake:
// raft accepts in one loop, where a peer that stalls its handshake would
// hold up every other; the handshake runs on the connection's first Read
// or Write instead, in the goroutine raft gives it.
func (s *raftStream) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.tls == nil {
		return c, err
	}
	return &raftServerConn{Conn: tls.Server(c, s.server), stream: s}, nil
}

// raftServerConn is an accepted Raft connection over TLS, which handshakes
// on first use, within raftHandshakeTimeout.
type raftServerConn struct {
	*tls.Conn
	stream *raftStream
	once   sync.Once
	err    error // the handshake's outcome: nil, or io.EOF
}

// handshake runs the handshake once. A refused one is logged here and
// reported as io.EOF, which raft takes for a peer gone: it closes the
// connection without logging it again.
func (c *raftServerConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			if ok, suppressed := c.stream.refusals.Allow(); ok {
				c.stream.log.Warn("refused a raft connection", "remote", c.RemoteAddr().String(), "error", err, "suppressed", suppressed)
			}
			c.err = io.EOF
		}
	})
	return c.err
}

func (c *raftServerConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *raftServerConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// newRaftTransport listens for Raft on bind and hands out advertise (the
// same address when empty): peers dial advertise, which a proxy may stand
// in front of. With files (not nil) every connection is TLS, and only a
// node certificate of the CA is accepted, as server and as client: a
// client's certificate of the same CA cannot speak Raft.
func newRaftTransport(bind, advertise string, files *tlsconf.Reloader, log hclog.Logger) (*raft.NetworkTransport, error) {
	if advertise == "" {
		advertise = bind
	}
	adv, err := raftAdvertise(advertise)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("server: listen for raft: %w", err)
	}
	s := &raftStream{Listener: ln, advertise: adv, tls: files, log: log, refusals: lograte.New(time.Second)}
	if files != nil {
		s.server = files.Server(tlsconf.Require, true)
	}
	if local := ln.Addr().(*net.TCPAddr); !local.IP.IsUnspecified() {
		s.dialer.LocalAddr = &net.TCPAddr{IP: local.IP}
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: s, MaxPool: 8, Timeout: 10 * time.Second, Logger: log,
	}), nil
}
