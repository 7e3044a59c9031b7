package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// ErrInsecure is wrapped by Validate's error about a node that would serve
// plaintext on an address other hosts can reach: one of its addresses is
// not on loopback, it has no TLS files and NodeConfig.Insecure is off.
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
		if a.addr != "" && !onLoopback(a.addr) {
			return a.name, a.addr
		}
	}
	return "", ""
}

// onLoopback reports whether addr (HOST:PORT) names a loopback host.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkExposure refuses an exposed node without TLS unless it is Insecure.
func (c *NodeConfig) checkExposure() error {
	if c.TLS.on() || c.Insecure {
		return nil
	}
	if name, addr := c.exposed(); addr != "" {
		return fmt.Errorf("%w: %s address %s is not on loopback: give --tls-cert, --tls-key and --tls-ca, or --insecure",
			ErrInsecure, name, addr)
	}
	return nil
}

// insecureAddr is the address an Insecure node serves plaintext on
// although other hosts can reach it; "" when the node has TLS, is not
// Insecure, or is on loopback only.
func (c *NodeConfig) insecureAddr() string {
	if c.TLS.on() || !c.Insecure {
		return ""
	}
	_, addr := c.exposed()
	return addr
}

// security is what a node's status says of its transport security.
type security struct {
	tls, insecure bool
}

// security is c's, for the node's status.
func (c *NodeConfig) security() security {
	return security{tls: c.TLS.on(), insecure: c.insecureAddr() != ""}
}

// warnInsecure logs, once at start, that an Insecure node serves
// plaintext on an address other hosts can reach.
func (c *NodeConfig) warnInsecure(log hclog.Logger) {
	if addr := c.insecureAddr(); addr != "" {
		log.Warn("serving without tls on a non-loopback address", "address", addr)
	}
}
