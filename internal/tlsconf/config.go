package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
)

// serverConfig is the config a handshake uses.
func (s *snapshot) serverConfig(a ClientAuth) *tls.Config {
	c := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		ClientAuth:             a.tlsType(),
		ClientCAs:              s.pool,
	}
	if s.cert != nil {
		c.Certificates = []tls.Certificate{*s.cert}
	}
	return c
}

// verifyNode refuses a peer that did not present a node certificate.
func verifyNode(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: none presented", ErrNotNode)
	}
	return checkNode(cs.PeerCertificates[0])
}

// CheckNodeCert reports whether leaf is a node's certificate, with both
// the serverAuth and clientAuth extended key usages (ErrNotNode if not):
// a node must not start with a client's, which every peer would refuse.
func CheckNodeCert(leaf *x509.Certificate) error { return checkNode(leaf) }

// checkNode reports whether leaf names both serverAuth and clientAuth,
// as (*CA).Issue makes a node's.
func checkNode(leaf *x509.Certificate) error {
	var server, client bool
	for _, u := range leaf.ExtKeyUsage {
		server = server || u == x509.ExtKeyUsageServerAuth
		client = client || u == x509.ExtKeyUsageClientAuth
	}
	if !server || !client {
		return fmt.Errorf("%w: %q lacks the serverAuth or the clientAuth extended key usage", ErrNotNode, leaf.Subject.CommonName)
	}
	return nil
}

// Server returns a server's config: TLS 1.3 only, no session tickets (a
// resumed session would skip checking the peer against a reloaded CA),
// and on each handshake the current certificate and CA. auth says what is
// asked of clients. nodesOnly (Raft) requires a client certificate
// whatever auth says, and one that is a node's: with both the serverAuth
// and clientAuth extended key usages, which a client's lacks.
//
// The Reloader must hold a certificate (Files.CheckNode); without one
// every handshake fails.
func (r *Reloader) Server(auth ClientAuth, nodesOnly bool) *tls.Config {
	if auth < Require || auth > None {
		auth = Require
	}
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s := r.current()
			if nodesOnly {
				return s.nodes, nil
			}
			return s.server[auth], nil
		},
	}
}

// Client returns a config for one dial, made of the current files: the CA
// as RootCAs, the certificate if any, TLS 1.3 only. ServerName is empty,
// so a tls.Dialer checks the dialled host: an IP literal against the
// server certificate's IP addresses, a name against its DNS names.
func (r *Reloader) Client() *tls.Config {
	s := r.current()
	c := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.pool}
	if s.cert != nil {
		c.Certificates = []tls.Certificate{*s.cert}
	}
	return c
}

// Leaf is the current certificate, or nil where none was given.
func (r *Reloader) Leaf() *x509.Certificate {
	if s := r.current(); s.cert != nil {
		return s.cert.Leaf
	}
	return nil
}
