package tlsconf

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
)

// Errors of the package.
var (
	// ErrIncomplete: a set of files that cannot make a TLS config.
	ErrIncomplete = errors.New("tlsconf: incomplete tls files")
	// ErrNoCertificate: a PEM file that should hold a certificate holds none.
	ErrNoCertificate = errors.New("tlsconf: no certificate in file")
	// ErrTooLarge: a file larger than MaxFileSize.
	ErrTooLarge = errors.New("tlsconf: file too large")
	// ErrNotNode: a peer whose certificate is not a node's (it lacks the
	// serverAuth or the clientAuth extended key usage).
	ErrNotNode = errors.New("tlsconf: peer certificate is not a node certificate")
	// ErrBadClientAuth: a client authentication mode that is not one of
	// none, request and require.
	ErrBadClientAuth = errors.New("tlsconf: unknown client auth mode")
)

// Files names the PEM files of one TLS identity. A node gives all three;
// a client gives CA alone (it has no certificate) or all three. CA holds
// one or more CERTIFICATE blocks: the authorities trusted to sign peers.
type Files struct {
	CA   string // the trusted CA certificates
	Cert string // this side's certificate (its chain after it, if any)
	Key  string // the certificate's private key
}

// IsZero reports whether no file is given: TLS is off.
func (f Files) IsZero() bool { return f == Files{} }

// Check reports whether f is a set a client can use: CA with both Cert
// and Key, or CA alone. Anything else is ErrIncomplete, saying what is
// missing.
func (f Files) Check() error {
	switch {
	case f.Cert != "" && f.Key == "":
		return fmt.Errorf("%w: a certificate (%s) needs its key file", ErrIncomplete, f.Cert)
	case f.Key != "" && f.Cert == "":
		return fmt.Errorf("%w: a key (%s) needs its certificate file", ErrIncomplete, f.Key)
	case f.CA == "":
		return fmt.Errorf("%w: the CA file is required", ErrIncomplete)
	}
	return nil
}

// CheckNode reports whether f is a set a node can use: all three files.
func (f Files) CheckNode() error {
	if err := f.Check(); err != nil {
		return err
	}
	if f.Cert == "" {
		return fmt.Errorf("%w: a node needs a certificate and its key", ErrIncomplete)
	}
	return nil
}

// ClientAuth is what a server asks of its clients' certificates. The zero
// value is Require.
type ClientAuth int

const (
	// Require: every client presents a certificate signed by the CA.
	Require ClientAuth = iota
	// Request: a client may present no certificate; one it presents must
	// be signed by the CA (tls.VerifyClientCertIfGiven).
	Request
	// None: no client certificate is asked for.
	None
)

// String is the mode's name as ParseClientAuth takes it.
func (a ClientAuth) String() string {
	switch a {
	case Require:
		return "require"
	case Request:
		return "request"
	case None:
		return "none"
	}
	return fmt.Sprintf("ClientAuth(%d)", int(a))
}

// tlsType is the crypto/tls mode; anything unknown is the strictest.
func (a ClientAuth) tlsType() tls.ClientAuthType {
	switch a {
	case Request:
		return tls.VerifyClientCertIfGiven
	case None:
		return tls.NoClientCert
	}
	return tls.RequireAndVerifyClientCert
}

// ParseClientAuth reads a mode: "none", "request" or "require" (any case;
// "" is the default, require).
func ParseClientAuth(s string) (ClientAuth, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "require":
		return Require, nil
	case "request":
		return Request, nil
	case "none":
		return None, nil
	}
	return Require, fmt.Errorf("%w %q: use none, request or require", ErrBadClientAuth, s)
}
