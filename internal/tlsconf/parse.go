package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"os"
)

// MaxFileSize bounds each PEM file read: a CA bundle of hundreds of
// certificates fits, and a wrong path (a log, a disk image) is refused
// before it is read into memory.
const MaxFileSize = 1 << 20

// material is what a set of files holds once parsed.
type material struct {
	pool *x509.CertPool   // the CA certificates
	cert *tls.Certificate // nil where no certificate was given; its Leaf set
}

// readFile reads path whole, refusing one over MaxFileSize.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tlsconf: read %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, path, MaxFileSize)
	}
	return b, nil
}

// readMaterial reads and parses the files of f.
func readMaterial(f Files) (material, error) {
	caPEM, err := readFile(f.CA)
	if err != nil {
		return material{}, err
	}
	var certPEM, keyPEM []byte
	if f.Cert != "" {
		if certPEM, err = readFile(f.Cert); err != nil {
			return material{}, err
		}
		if keyPEM, err = readFile(f.Key); err != nil {
			return material{}, err
		}
	}
	m, err := parseMaterial(caPEM, certPEM, keyPEM, f.Cert != "")
	if err != nil {
		return material{}, fmt.Errorf("%w (ca %s, cert %s, key %s)", err, f.CA, f.Cert, f.Key)
	}
	return m, nil
}

// parseMaterial parses the CA bundle and, where withCert, the certificate
// and its key, which must match.
func parseMaterial(caPEM, certPEM, keyPEM []byte, withCert bool) (material, error) {
	pool, err := parseCAs(caPEM)
	if err != nil {
		return material{}, err
	}
	m := material{pool: pool}
	if !withCert {
		return m, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return material{}, fmt.Errorf("tlsconf: certificate and key: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return material{}, fmt.Errorf("tlsconf: certificate: %w", err)
		}
	}
	m.cert = &cert
	return m, nil
}

// parseCAs makes a pool of every CERTIFICATE block in b (other blocks are
// skipped). A block that does not parse is an error, and so is a bundle
// with no certificate at all.
func parseCAs(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: CA certificate %d: %w", n+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the CA file has no CERTIFICATE block", ErrNoCertificate)
	}
	return pool, nil
}
