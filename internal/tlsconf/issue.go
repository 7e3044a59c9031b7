package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// Defaults of NewCA and Issue.
const (
	DefaultCAName     = "qmq cluster CA"
	DefaultCAValidity = 3650 * 24 * time.Hour
	DefaultValidity   = 365 * 24 * time.Hour
)

// backdate is how long before now a certificate starts, so that a peer
// whose clock is a little behind accepts it.
const backdate = time.Hour

// Errors of issuing.
var (
	// ErrBadSpec: a certificate that cannot be issued as asked.
	ErrBadSpec = errors.New("tlsconf: bad certificate spec")
	// ErrNotCA: a CA file whose certificate may not sign others, or whose
	// key is not its certificate's.
	ErrNotCA = errors.New("tlsconf: not a usable CA")
)

// CA is a certificate authority that issues node and client certificates.
type CA struct {
	Cert *x509.Certificate
	key  crypto.Signer
}

// NewCA makes a CA: a new ECDSA P-256 key and a self-signed certificate
// named cn (default DefaultCAName) valid for validity (default
// DefaultCAValidity), which signs end certificates only (path length 0).
func NewCA(cn string, validity time.Duration) (*CA, error) {
	if cn == "" {
		cn = DefaultCAName
	}
	if validity == 0 {
		validity = DefaultCAValidity
	}
	if validity < 0 {
		return nil, fmt.Errorf("%w: CA validity %s is negative", ErrBadSpec, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		// SerialNumber nil: crypto/x509 makes a random one (RFC 5280).
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads the CA that (*CA).Write stored in dir: ca.pem and
// ca-key.pem (PKCS#8).
func LoadCA(dir string) (*CA, error) {
	certPEM, err := readFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

// parseCA parses a CA's certificate and key, which must match.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%w: the CA file does not start with a CERTIFICATE block", ErrNoCertificate)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%w: %q may not sign certificates", ErrNotCA, cert.Subject.CommonName)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: the CA key file does not start with a PRIVATE KEY block", ErrNotCA)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: the CA key cannot sign", ErrNotCA)
	}
	pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%w: the key is not the CA certificate's", ErrNotCA)
	}
	return &CA{Cert: cert, key: signer}, nil
}

// CertPEM is the CA's certificate in PEM: the file every node and client
// trusts.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// Write stores the CA in dir as ca.pem and ca-key.pem (mode 0600), for
// LoadCA. It never overwrites: a CA replaced would orphan every
// certificate it issued.
func (ca *CA) Write(dir string) error {
	keyPEM, err := encodeKey(ca.key)
	if err != nil {
		return err
	}
	return WriteFiles(dir, "ca", ca.CertPEM(), keyPEM, false)
}

// Spec is a certificate to issue.
type Spec struct {
	CN  string   // its subject's common name: the node id or client name; required
	IPs []net.IP // the IP addresses it is valid for (a node's, as dialled)
	DNS []string // the host names it is valid for
	// Node: a node's certificate, with both the serverAuth and clientAuth
	// extended key usages (nodes dial each other), and at least one IP or
	// DNS name. Otherwise a client's: clientAuth only.
	Node bool
	// Validity is how long it is valid, at most until the CA expires.
	// Default DefaultValidity (365 days).
	Validity time.Duration
}

// Issue makes a new ECDSA P-256 key and a certificate for it signed by
// the CA, both in PEM; the key is PKCS#8 ("PRIVATE KEY").
func (ca *CA) Issue(s Spec) (certPEM, keyPEM []byte, err error) {
	switch {
	case s.CN == "":
		return nil, nil, fmt.Errorf("%w: no common name", ErrBadSpec)
	case s.Node && len(s.IPs) == 0 && len(s.DNS) == 0:
		return nil, nil, fmt.Errorf("%w: node %q needs at least one IP address or DNS name", ErrBadSpec, s.CN)
	case s.Validity < 0:
		return nil, nil, fmt.Errorf("%w: validity %s is negative", ErrBadSpec, s.Validity)
	}
	if s.Validity == 0 {
		s.Validity = DefaultValidity
	}
	now := time.Now()
	notAfter := now.Add(s.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if s.Node {
		usage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: s.CN},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		BasicConstraintsValid: true,
		IPAddresses:           s.IPs,
		DNSNames:              s.DNS,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: certificate %q: %w", s.CN, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// encodeKey is key as a PKCS#8 PEM block.
func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
