package transport

import (
	"context"
	"crypto/x509"
	"sync/atomic"
)

// Peer is the client at the other end of a server connection, as a
// handler sees it (PeerOf): its address, the certificate it presented over
// TLS, and the identity a handler gave the connection after it proved one
// (a Hello).
type Peer struct {
	// Addr is the client's address (IP:port).
	Addr string
	// Certificate is the client's TLS certificate, verified against the
	// server's CA; nil without TLS or when the client presented none.
	Certificate *x509.Certificate

	identity atomic.Value // of any; set by SetIdentity
}

type peerKey struct{}

// PeerOf returns the connection's peer of a request's ctx, or nil outside
// a Server's handler.
func PeerOf(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// WithPeer returns ctx carrying p, as a Server's handler sees it; for
// tests and for servers that call a Handler themselves.
func WithPeer(ctx context.Context, p *Peer) context.Context {
	return context.WithValue(ctx, peerKey{}, p)
}

// SetIdentity records who the connection works for; every later request
// on it sees it. A connection's identity may be replaced (a second Hello).
func (p *Peer) SetIdentity(v any) { p.identity.Store(&v) }

// Identity returns what SetIdentity recorded, or nil.
func (p *Peer) Identity() any {
	if v, ok := p.identity.Load().(*any); ok {
		return *v
	}
	return nil
}
