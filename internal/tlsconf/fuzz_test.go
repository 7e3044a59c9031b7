package tlsconf

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: no bytes in the CA, certificate and key files make Load, the
// configs it gives or LoadCA panic.
func FuzzLoad(f *testing.F) {
	ca := newCA(f)
	cert, key := issue(f, ca, nodeSpec("n1"))
	f.Add(ca.CertPEM(), cert, key)
	f.Add(ca.CertPEM(), cert, cert)
	f.Add(key, key, cert)
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), cert[:len(cert)/2], key[:len(key)/2])
	f.Fuzz(func(t *testing.T, caPEM, certPEM, keyPEM []byte) {
		dir := t.TempDir()
		files := Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n.pem"), Key: filepath.Join(dir, "n-key.pem")}
		for path, b := range map[string][]byte{files.CA: caPEM, files.Cert: certPEM, files.Key: keyPEM} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if r, err := Load(files, Options{CheckEvery: -1}); err == nil {
			r.Server(Require, true)
			r.Client()
			if r.Leaf() == nil {
				t.Fatal("a loaded certificate has no leaf")
			}
		}
		if r, err := Load(Files{CA: files.CA}, Options{}); err == nil {
			r.Client()
		}
		if err := os.Rename(files.Key, filepath.Join(dir, "ca-key.pem")); err != nil {
			t.Fatal(err)
		}
		LoadCA(dir)
	})
}
