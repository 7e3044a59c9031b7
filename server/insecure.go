package server

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// ErrInsecure is wrapped by Validate's error about a node that anyone
// could use on an address other hosts can reach: one of its addresses is
// not on loopback, NodeConfig.Insecure is off, and it has no TLS files,
// or has them but asks clients for neither a certificate
// (TLSConfig.ClientAuth require) nor an application (Auth).
var ErrInsecure = errors.New("server: config: plaintext on a non-loopback address")

// exposed returns the first of the node's addresses (client, Raft and
// HTTP, each followed by its advertised form if set) whose host is not on
// loopback, with its name; "" if all are. Loopback is an IP for which
// IsLoopback holds, or "localhost"; an empty host (":6222"), 0.0.0.0, ::,
// any other IP and any other host name are not.
func (c *NodeConfig) exposed() (name, addr string) {
	for _, a := range []struct{ name, addr string }{
		{"client", c.ClientAddr}, {"client advertise", c.AdvertiseAddr},
		{"raft", c.RaftAddr}, {"raft advertise", c.RaftAdvertiseAddr},
		{"http", c.HTTPAddr},
	} {
		if a.addr != "" && !transport.OnLoopback(a.addr) {
			return a.name, a.addr
		}
	}
	return "", ""
}

// checkExposure refuses, unless it is Insecure, an exposed node without
// TLS, or with TLS that lets in clients with neither a certificate nor an
// application (client auth none or request, without Auth).
func (c *NodeConfig) checkExposure() error {
	if c.Insecure || !c.open() {
		return nil
	}
	name, addr := c.exposed()
	switch {
	case addr == "":
		return nil
	case !c.TLS.on():
		return fmt.Errorf("%w: %s address %s is not on loopback: give --tls-cert, --tls-key and --tls-ca, or --insecure",
			ErrInsecure, name, addr)
	}
	return fmt.Errorf("%w: %s address %s is not on loopback and clients need neither a certificate nor an application: "+
		"give --auth, or --tls-client-auth require, or --insecure", ErrInsecure, name, addr)
}

// open reports whether anyone who reaches the node may use it: it has no
// TLS, or its clients need no certificate and it does not check
// applications.
func (c *NodeConfig) open() bool {
	if !c.TLS.on() {
		return true
	}
	a, _ := tlsconf.ParseClientAuth(c.TLS.ClientAuth)
	return a != tlsconf.Require && !c.Auth
}

// insecureAddr is the address an Insecure node is open on (see open)
// although other hosts can reach it; "" when the node is not open, not
// Insecure, or on loopback only.
func (c *NodeConfig) insecureAddr() string {
	if !c.open() || !c.Insecure {
		return ""
	}
	_, addr := c.exposed()
	return addr
}

// security is what a node's status says of its transport security.
type security struct {
	tls, insecure, auth bool
}

// security is c's, for the node's status.
func (c *NodeConfig) security() security {
	return security{tls: c.TLS.on(), insecure: c.insecureAddr() != "", auth: c.Auth}
}

// warnInsecure logs, once at start, that an Insecure node serves
// plaintext on an address other hosts can reach.
func (c *NodeConfig) warnInsecure(log hclog.Logger) {
	if addr := c.insecureAddr(); addr != "" {
		log.Warn("serving anyone who reaches a non-loopback address", "address", addr, "tls", c.TLS.on())
	}
}

// ErrAuthConfig is wrapped by Validate's error about authentication that
// cannot work as configured.
var ErrAuthConfig = errors.New("server: config: auth")

// checkAuth refuses Auth without TLS client certificates: nodes know each
// other by their certificates, and a secret must not cross plaintext.
func (c *NodeConfig) checkAuth() error {
	if !c.Auth {
		return nil
	}
	if !c.TLS.on() {
		return fmt.Errorf("%w: --auth needs TLS (--tls-cert, --tls-key, --tls-ca): nodes know each other by their certificates", ErrAuthConfig)
	}
	if a, _ := tlsconf.ParseClientAuth(c.TLS.ClientAuth); a == tlsconf.None {
		return fmt.Errorf("%w: --auth needs --tls-client-auth request or require: nodes know each other by their certificates", ErrAuthConfig)
	}
	return nil
}
