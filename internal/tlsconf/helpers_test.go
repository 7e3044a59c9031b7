package tlsconf

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"sync"
	"testing"
)

// loopback is the address the test nodes' certificates are valid for.
var loopback = net.IPv4(127, 0, 0, 1)

// newCA makes a CA for a test.
func newCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue makes a certificate of ca for a test.
func issue(t testing.TB, ca *CA, s Spec) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(s)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

// nodeSpec is a node certificate valid on loopback.
func nodeSpec(cn string) Spec { return Spec{CN: cn, IPs: []net.IP{loopback}, Node: true} }

// writeSet stores ca's certificate as dir/ca.pem and a new certificate of
// spec as dir/<spec.CN>.pem and its key, and names the three.
func writeSet(t testing.TB, dir string, ca *CA, s Spec) Files {
	t.Helper()
	cert, key := issue(t, ca, s)
	writeCA(t, dir, ca)
	if err := WriteFiles(dir, s.CN, cert, key, true); err != nil {
		t.Fatal(err)
	}
	return Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, s.CN+".pem"), Key: filepath.Join(dir, s.CN+"-key.pem")}
}

// writeCA replaces dir/ca.pem, by rename, with the given CAs' certificates.
func writeCA(t testing.TB, dir string, cas ...*CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.CertPEM()...)
	}
	replace(t, filepath.Join(dir, "ca.pem"), b)
}

// replace writes path anew through a rename, as an operator rotates.
func replace(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := writeAtomic(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// parseLeaf is the certificate in certPEM.
func parseLeaf(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// warnings records what a Reloader warns.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) warn(msg string, kv ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warnings) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.msgs)
}
