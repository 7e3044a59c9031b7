package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/qmqgo/qmq"
	"time"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// TLSConfig names a node's TLS files. With them, the node's ports are
// TLS-only and its dials to other nodes are TLS, all with one certificate
// reloaded from its files (see internal/tlsconf). Without them (the zero
// value), everything is plaintext.
type TLSConfig struct {
	// CAFile holds the PEM certificates of the CAs the node trusts: the
	// certificates of the nodes it dials and of the clients and nodes
	// that dial it must be signed by one of them. Required with CertFile.
	CAFile string
	// CertFile is the node's PEM certificate, a node certificate (both
	// the serverAuth and clientAuth extended key usages: nodes dial each
	// other) valid for every host the node is dialled at, clients' and
	// Raft's alike. Default: none, TLS off.
	CertFile string
	// KeyFile is CertFile's private key (PEM). Required with CertFile.
	KeyFile string
	// ClientAuth is what the client and HTTP ports ask of a client's
	// certificate: "require" (one signed by the CA), "request" (verified
	// if the client presents one) or "none". Default "" is require. The
	// Raft port requires a node certificate whatever it says.
	ClientAuth string
	// ReloadCheck is the least time between two looks at the files (three
	// stats, on a handshake or dial): replaced files are used by new
	// connections within it. Default 0 means 1 s; a negative value looks
	// on every handshake and dial (for tests).
	ReloadCheck time.Duration
}

// ErrTLSConfig is wrapped by Validate's errors about NodeConfig.TLS.
var ErrTLSConfig = errors.New("server: config: tls")

// files is c's files in tlsconf's terms.
func (c TLSConfig) files() tlsconf.Files {
	return tlsconf.Files{CA: c.CAFile, Cert: c.CertFile, Key: c.KeyFile}
}

// on reports whether TLS is on: files are given (check makes sure that
// all three are).
func (c TLSConfig) on() bool { return !c.files().IsZero() }

// check reports a set of files a node cannot serve with (all three are
// needed), and a client auth mode that is unknown or given without files.
func (c TLSConfig) check() error {
	if c.files().IsZero() {
		if c.ClientAuth != "" {
			return fmt.Errorf("%w: client auth %q is given without the certificate files", ErrTLSConfig, c.ClientAuth)
		}
		return nil
	}
	if err := c.files().CheckNode(); err != nil {
		return fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	if _, err := tlsconf.ParseClientAuth(c.ClientAuth); err != nil {
		return fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	return nil
}

// nodeTLS is a node's loaded TLS files, shared by its listeners and its
// dials; nil when the node has none.
type nodeTLS struct {
	files *tlsconf.Reloader
	auth  tlsconf.ClientAuth // the client port's
}

// loadTLS reads the files of c (checked by Validate), so that a node whose
// files do not load, or whose certificate is a client's, refuses to
// start; a replaced set that does not load later is logged through warn
// and the previous one kept.
func loadTLS(c TLSConfig, warn func(msg string, kv ...any)) (*nodeTLS, error) {
	if c.files().IsZero() {
		return nil, nil
	}
	auth, err := tlsconf.ParseClientAuth(c.ClientAuth)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	r, err := tlsconf.Load(c.files(), tlsconf.Options{CheckEvery: c.ReloadCheck, Warn: warn})
	if err != nil {
		return nil, fmt.Errorf("server: tls: %w", err)
	}
	if err := tlsconf.CheckNodeCert(r.Leaf()); err != nil {
		return nil, fmt.Errorf("server: tls: %s: %w", c.CertFile, err)
	}
	return &nodeTLS{files: r, auth: auth}, nil
}

// reloader is the node's files, nil for plaintext.
func (t *nodeTLS) reloader() *tlsconf.Reloader {
	if t == nil {
		return nil
	}
	return t.files
}

// clientServer is the client port's TLS config, nil for plaintext.
func (t *nodeTLS) clientServer() *tls.Config {
	if t == nil {
		return nil
	}
	return t.files.Server(t.auth, false)
}

// httpServer is the HTTP port's TLS config, nil for plaintext: open asks
// clients for no certificate; authOn requires one of the CA; otherwise it
// asks what the client port asks.
func (t *nodeTLS) httpServer(authOn, open bool) *tls.Config {
	switch {
	case t == nil:
		return nil
	case open:
		return t.files.Server(tlsconf.None, false)
	case authOn:
		return t.files.Server(tlsconf.Require, false)
	}
	return t.files.Server(t.auth, false)
}

// dialer is how the node dials other nodes: with its own certificate,
// which is also a client's, checking theirs against the CA.
func (t *nodeTLS) dialer() transport.Dialer {
	if t == nil {
		return transport.Dialer{}
	}
	return transport.Dialer{TLS: t.files.Client}
}

// consoleConn is how the console reaches the cluster through the node's
// client port: checking the node's certificate against the CA, and
// presenting none of its own, so that a caller of the console has its
// application's rights and never the node's. Nil options for plaintext.
func (t *nodeTLS) consoleConn() []qmq.ConnOption {
	if t == nil {
		return nil
	}
	c := t.files.Client()
	c.Certificates = nil
	return []qmq.ConnOption{qmq.WithTLSConfig(c)}
}
