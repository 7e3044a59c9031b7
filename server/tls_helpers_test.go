package server

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/tlsconf"
)

// tlsFixture is a CA of a test's and the files of the certificates it
// issued, in a directory of the test's, as `qmqctl tls init` writes them.
type tlsFixture struct {
	tb  testing.TB
	dir string
	ca  *tlsconf.CA
}

func newTLSFixture(tb testing.TB) *tlsFixture {
	tb.Helper()
	ca, err := tlsconf.NewCA("", 0)
	if err != nil {
		tb.Fatal(err)
	}
	f := &tlsFixture{tb: tb, dir: tb.TempDir(), ca: ca}
	if err := ca.Write(f.dir); err != nil {
		tb.Fatal(err)
	}
	return f
}

// issue writes a new certificate of s as name.pem and its key, replacing
// any earlier one by rename, and returns the certificate.
func (f *tlsFixture) issue(name string, s tlsconf.Spec) []byte {
	f.tb.Helper()
	cert, key, err := f.ca.Issue(s)
	if err != nil {
		f.tb.Fatal(err)
	}
	if err := tlsconf.WriteFiles(f.dir, name, cert, key, true); err != nil {
		f.tb.Fatal(err)
	}
	return cert
}

// node issues a node certificate valid for 127.0.0.1, where test nodes
// listen, and returns a node's TLSConfig of it that looks at its files on
// every handshake.
func (f *tlsFixture) node(name string) TLSConfig {
	f.tb.Helper()
	f.issue(name, tlsconf.Spec{CN: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: true})
	return f.config(name)
}

// config is a node's TLSConfig of the files of name.
func (f *tlsFixture) config(name string) TLSConfig {
	fs := f.files(name)
	return TLSConfig{CAFile: fs.CA, CertFile: fs.Cert, KeyFile: fs.Key, ReloadCheck: -1}
}

// client issues a client certificate and returns an SDK option that
// connects with it.
func (f *tlsFixture) client(name string) qmq.ConnOption {
	f.tb.Helper()
	f.issue(name, tlsconf.Spec{CN: name})
	return qmq.WithTLS(f.files(name))
}

// files names the CA and name's certificate and key.
func (f *tlsFixture) files(name string) qmq.TLSFiles {
	return qmq.TLSFiles{CA: filepath.Join(f.dir, "ca.pem"),
		Cert: filepath.Join(f.dir, name+".pem"), Key: filepath.Join(f.dir, name+"-key.pem")}
}

// withTLS is a startGroup tweak: each node serves with a node certificate
// of f's.
func withTLS(f *tlsFixture) func(id string, c *Config) {
	return func(id string, c *Config) { c.TLS = f.node(id) }
}

// connOf is how a test client connects to a node of config c: with the
// node's own certificate (a node's is also a client's) when it has one.
func connOf(c TLSConfig) qmq.ConnOption {
	if c.CertFile == "" {
		return qmq.ConnOption{}
	}
	return qmq.WithTLS(qmq.TLSFiles{CA: c.CAFile, Cert: c.CertFile, Key: c.KeyFile})
}

// parseCert parses the certificate in certPEM.
func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(b.Bytes)
}
