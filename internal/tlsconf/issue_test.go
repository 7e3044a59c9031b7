package tlsconf

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	ca := newCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA basic constraints: IsCA %v, valid %v, MaxPathLen %d, zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("CA key usage %v", c.KeyUsage)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", c.PublicKey)
	}
	if c.Subject.CommonName != DefaultCAName || c.SerialNumber == nil || c.SerialNumber.Sign() <= 0 {
		t.Errorf("CA name %q, serial %v", c.Subject.CommonName, c.SerialNumber)
	}
	if now := time.Now(); !c.NotBefore.Before(now.Add(-backdate/2)) || c.NotAfter.Before(now.Add(DefaultCAValidity-time.Hour)) {
		t.Errorf("CA valid %s to %s", c.NotBefore, c.NotAfter)
	}
	if _, err := NewCA("x", -time.Second); !errors.Is(err, ErrBadSpec) {
		t.Errorf("a negative CA validity: %v, want ErrBadSpec", err)
	}
}

// verify checks certPEM against ca for usage, at host if not empty.
func verify(t *testing.T, ca *CA, certPEM []byte, host string, usage x509.ExtKeyUsage) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := parseLeaf(t, certPEM).Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func TestIssuedCertificatesVerify(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	node, _ := issue(t, ca, Spec{CN: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 5)}, DNS: []string{"n1.qmq.test"}, Node: true})
	client, _ := issue(t, ca, Spec{CN: "app"})
	for _, tc := range []struct {
		name  string
		ca    *CA
		cert  []byte
		host  string
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{"node as server on its IP", ca, node, "127.0.0.5", x509.ExtKeyUsageServerAuth, true},
		{"node as server on its name", ca, node, "n1.qmq.test", x509.ExtKeyUsageServerAuth, true},
		{"node as client", ca, node, "", x509.ExtKeyUsageClientAuth, true},
		{"node on another IP", ca, node, "127.0.0.6", x509.ExtKeyUsageServerAuth, false},
		{"client as client", ca, client, "", x509.ExtKeyUsageClientAuth, true},
		{"client as server", ca, client, "", x509.ExtKeyUsageServerAuth, false},
		{"node against another CA", other, node, "127.0.0.5", x509.ExtKeyUsageServerAuth, false},
		{"node as client against another CA", other, node, "", x509.ExtKeyUsageClientAuth, false},
		{"client against another CA", other, client, "", x509.ExtKeyUsageClientAuth, false},
	} {
		if err := verify(t, tc.ca, tc.cert, tc.host, tc.usage); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	leaf := parseLeaf(t, node)
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("node key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.IsCA || leaf.KeyUsage != x509.KeyUsageDigitalSignature || leaf.Subject.CommonName != "n1" {
		t.Errorf("node cert: IsCA %v, key usage %v, CN %q", leaf.IsCA, leaf.KeyUsage, leaf.Subject.CommonName)
	}
}

func TestIssueValidity(t *testing.T) {
	ca, err := NewCA("short", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := issue(t, ca, Spec{CN: "app"})
	if got := parseLeaf(t, c).NotAfter; got.After(ca.Cert.NotAfter) {
		t.Errorf("a certificate outlives its CA: %s after %s", got, ca.Cert.NotAfter)
	}
	c, _ = issue(t, ca, Spec{CN: "app", Validity: time.Hour})
	if got := parseLeaf(t, c).NotAfter; got.After(time.Now().Add(time.Hour)) {
		t.Errorf("a one-hour certificate ends at %s", got)
	}
	for _, s := range []Spec{
		{},
		{CN: "n1", Node: true},
		{CN: "app", Validity: -time.Second},
	} {
		if _, _, err := ca.Issue(s); !errors.Is(err, ErrBadSpec) {
			t.Errorf("Issue(%+v) = %v, want ErrBadSpec", s, err)
		}
	}
}

func TestCAWriteAndLoad(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(dir); !errors.Is(err, ErrExists) {
		t.Fatalf("writing the CA again: %v, want ErrExists", err)
	}
	loaded, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) {
		t.Fatal("LoadCA read another certificate")
	}
	c, _ := issue(t, loaded, Spec{CN: "app"})
	if err := verify(t, ca, c, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Fatalf("a certificate of the loaded CA: %v", err)
	}

	// A key that is not the CA's, and a certificate that is not a CA.
	other := t.TempDir()
	if err := newCA(t).Write(other); err != nil {
		t.Fatal(err)
	}
	replace(t, filepath.Join(dir, "ca-key.pem"), mustRead(t, filepath.Join(other, "ca-key.pem")))
	if _, err := LoadCA(dir); !errors.Is(err, ErrNotCA) {
		t.Fatalf("LoadCA with another CA's key: %v, want ErrNotCA", err)
	}
	leafDir := t.TempDir()
	cert, key := issue(t, ca, Spec{CN: "app"})
	if err := WriteFiles(leafDir, "ca", cert, key, false); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(leafDir); !errors.Is(err, ErrNotCA) {
		t.Fatalf("LoadCA of a client certificate: %v, want ErrNotCA", err)
	}
	if _, err := LoadCA(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCA of an empty dir: %v, want ErrNotExist", err)
	}
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	ca := newCA(t)
	cert, key := issue(t, ca, Spec{CN: "app"})
	if err := WriteFiles(dir, "app", cert, key, false); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"app.pem": 0o644, "app-key.pem": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "app-key.pem")); !bytes.HasPrefix(b, []byte("-----BEGIN PRIVATE KEY-----")) {
		t.Errorf("the key is not PKCS#8 PEM: %.40q", b)
	}

	cert2, key2 := issue(t, ca, Spec{CN: "app"})
	if err := WriteFiles(dir, "app", cert2, key2, false); !errors.Is(err, ErrExists) {
		t.Fatalf("writing over without force: %v, want ErrExists", err)
	}
	if !bytes.Equal(mustRead(t, filepath.Join(dir, "app.pem")), cert) || !bytes.Equal(mustRead(t, filepath.Join(dir, "app-key.pem")), key) {
		t.Fatal("a refused write changed the files")
	}
	// Either file existing is enough to refuse.
	if err := os.Remove(filepath.Join(dir, "app.pem")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFiles(dir, "app", cert2, key2, false); !errors.Is(err, ErrExists) {
		t.Fatalf("writing over a key without force: %v, want ErrExists", err)
	}
	if err := WriteFiles(dir, "app", cert2, key2, true); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, filepath.Join(dir, "app.pem")), cert2) || !bytes.Equal(mustRead(t, filepath.Join(dir, "app-key.pem")), key2) {
		t.Fatal("a forced write did not replace the files")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("the directory holds %d entries, want the 2 files (no temporary left)", len(entries))
	}
	for _, name := range []string{"", ".", "..", "a/b", `a\b`} {
		if err := WriteFiles(dir, name, cert, key, true); !errors.Is(err, ErrBadSpec) {
			t.Errorf("WriteFiles name %q: %v, want ErrBadSpec", name, err)
		}
	}
}
