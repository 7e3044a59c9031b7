package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
)

// ErrTLS means a TLS handshake failed: the peer's certificate is not
// trusted or not valid for the address dialled, this side's certificate
// was refused, or the peer does not speak TLS (or speaks it where this
// side does not). Retrying the same connection cannot help, so it is not
// an *Error and LeaderClient.Call returns it at once.
var ErrTLS = errors.New("transport: tls handshake failed")

// ErrPlaintextSecret refuses to dial, with Credentials and without TLS,
// an address that is not on loopback: the Hello would carry the secret in
// the clear. It is not an *Error, so a LeaderClient returns it at once.
var ErrPlaintextSecret = errors.New("transport: refusing to send an application's secret without TLS to an address off loopback")

// OnLoopback reports whether addr (HOST:PORT) names a loopback host: an
// IP for which IsLoopback holds, or "localhost".
func OnLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Dialer opens client connections. The zero value dials plaintext TCP.
type Dialer struct {
	// TLS, if set, makes every connection TLS: it is called once per dial
	// for the config to use, so that a config built from files that are
	// reloaded (tlsconf.Reloader.Client) takes effect on the next dial. A
	// config whose ServerName is empty checks the server's certificate
	// against the host dialled: an IP literal against its IP addresses, a
	// name against its DNS names. Nil (the default): plaintext.
	TLS func() *tls.Config
	// Credentials, if set, are sent in a Hello on every connection
	// before Dial returns it: the connection works for that application.
	Credentials *Credentials
	// Source, if set, is the local IP connections are made from (nil: the
	// system's choice).
	Source net.IP
}

// Dial connects to addr with the zero Dialer: plaintext.
func Dial(ctx context.Context, addr string) (*Conn, error) { return Dialer{}.Dial(ctx, addr) }

// NewLeaderClient returns a LeaderClient of the zero Dialer: plaintext.
func NewLeaderClient(servers []string) (*LeaderClient, error) {
	return Dialer{}.NewLeaderClient(servers)
}

// Dial connects to addr, and with TLS set completes the handshake before
// it returns; with Credentials set, so does the Hello (an
// UNAUTHENTICATED refusal is an *Error that is not retriable). A connection that cannot be made is an Unavailable *Error; a
// handshake that fails on a certificate, an alert from the peer or a peer
// that does not speak TLS is ErrTLS.
func (d Dialer) Dial(ctx context.Context, addr string) (*Conn, error) {
	if d.Credentials != nil && d.TLS == nil && !OnLoopback(addr) {
		return nil, fmt.Errorf("%w: %s", ErrPlaintextSecret, addr)
	}
	var c net.Conn
	var err error
	nd := &net.Dialer{}
	silenceBounded(nd)
	if d.Source != nil {
		nd.LocalAddr = &net.TCPAddr{IP: d.Source}
	}
	if d.TLS == nil {
		c, err = nd.DialContext(ctx, "tcp", addr)
	} else {
		c, err = (&tls.Dialer{NetDialer: nd, Config: d.TLS()}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		if isTLSError(err) {
			return nil, fmt.Errorf("%w: dial %s: %v", ErrTLS, addr, err)
		}
		return nil, &Error{Code: Unavailable, Message: fmt.Sprintf("dial %s: %v", addr, err)}
	}
	conn := newConn(addr, c)
	if d.Credentials != nil {
		hello := &HelloRequest{App: d.Credentials.App, Secret: d.Credentials.Secret}
		body, err := conn.Call(ctx, TypeHello, hello.Encode())
		if err != nil {
			conn.Close()
			return nil, err
		}
		if r, err := DecodeHelloResponse(body); err == nil {
			conn.versions = &r.Versions // before anyone else has conn
		}
	}
	return conn, nil
}

// isTLSError reports whether err is a handshake's refusal rather than a
// network failure: a certificate that does not verify, an alert the peer
// sent (in TLS 1.3 a server refusing the client's certificate says so on
// the client's first read, after its handshake returned), or bytes that
// are not TLS.
func isTLSError(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	// Over TCP, crypto/tls reports an alert received as a *net.OpError
	// whose Op is "remote error" around an unexported alert type.
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "remote error" {
		return true
	}
	return false
}
