package tlsconf

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLoadRefusesWhatCannotServe(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	good := writeSet(t, dir, ca, nodeSpec("n1"))
	other := writeSet(t, t.TempDir(), ca, nodeSpec("n2"))
	noCert := filepath.Join(dir, "no-cert.pem")
	if err := os.WriteFile(noCert, mustRead(t, good.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	badCA := filepath.Join(dir, "bad-ca.pem")
	if err := os.WriteFile(badCA, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		f    Files
		want error // nil: any error
	}{
		{"missing CA", Files{CA: missing, Cert: good.Cert, Key: good.Key}, fs.ErrNotExist},
		{"missing cert", Files{CA: good.CA, Cert: missing, Key: good.Key}, fs.ErrNotExist},
		{"missing key", Files{CA: good.CA, Cert: good.Cert, Key: missing}, fs.ErrNotExist},
		{"key of another cert", Files{CA: good.CA, Cert: good.Cert, Key: other.Key}, nil},
		{"CA file with a key only", Files{CA: noCert, Cert: good.Cert, Key: good.Key}, ErrNoCertificate},
		{"CA file with a broken certificate", Files{CA: badCA, Cert: good.Cert, Key: good.Key}, nil},
		{"cert without key", Files{CA: good.CA, Cert: good.Cert}, ErrIncomplete},
		{"key without cert", Files{CA: good.CA, Key: good.Key}, ErrIncomplete},
		{"no CA", Files{Cert: good.Cert, Key: good.Key}, ErrIncomplete},
		{"nothing", Files{}, ErrIncomplete},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(tc.f, Options{})
			if err == nil {
				t.Fatalf("Load(%+v) = %v, want an error", tc.f, r)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Load: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := Load(good, Options{}); err != nil {
		t.Fatalf("Load of a good set: %v", err)
	}
}

func TestFilesCheck(t *testing.T) {
	for _, tc := range []struct {
		f            Files
		client, node bool // whether each accepts it
	}{
		{Files{CA: "c", Cert: "x", Key: "k"}, true, true},
		{Files{CA: "c"}, true, false},
		{Files{CA: "c", Cert: "x"}, false, false},
		{Files{CA: "c", Key: "k"}, false, false},
		{Files{Cert: "x", Key: "k"}, false, false},
		{Files{}, false, false},
	} {
		if err := tc.f.Check(); (err == nil) != tc.client || (err != nil && !errors.Is(err, ErrIncomplete)) {
			t.Errorf("%+v.Check() = %v, want ok=%v", tc.f, err, tc.client)
		}
		if err := tc.f.CheckNode(); (err == nil) != tc.node || (err != nil && !errors.Is(err, ErrIncomplete)) {
			t.Errorf("%+v.CheckNode() = %v, want ok=%v", tc.f, err, tc.node)
		}
	}
	if !(Files{}).IsZero() || (Files{CA: "c"}).IsZero() {
		t.Error("IsZero is wrong")
	}
}

func TestFileSizeLimit(t *testing.T) {
	dir := t.TempDir()
	f := writeSet(t, dir, newCA(t), nodeSpec("n1"))
	caPEM := mustRead(t, f.CA)
	for _, tc := range []struct {
		size int
		ok   bool
	}{{MaxFileSize - 1, true}, {MaxFileSize, true}, {MaxFileSize + 1, false}} {
		// Text outside PEM blocks is ignored, so padding keeps the CA valid.
		padded := append(bytes.Repeat([]byte{'\n'}, tc.size-len(caPEM)), caPEM...)
		replace(t, f.CA, padded)
		_, err := Load(f, Options{})
		if tc.ok && err != nil {
			t.Errorf("a %d-byte CA file: %v", tc.size, err)
		}
		if !tc.ok && !errors.Is(err, ErrTooLarge) {
			t.Errorf("a %d-byte CA file: %v, want ErrTooLarge", tc.size, err)
		}
	}
}

// watchedNode writes node n1's files, issued by a new CA, into a new
// directory and loads them, checked on every handshake, with warnings
// recorded.
func watchedNode(t *testing.T) (dir string, ca *CA, f Files, r *Reloader, w *warnings) {
	t.Helper()
	dir = t.TempDir()
	ca = newCA(t)
	f = writeSet(t, dir, ca, nodeSpec("n1"))
	w = &warnings{}
	r, err := Load(f, Options{CheckEvery: -1, Warn: w.warn})
	if err != nil {
		t.Fatal(err)
	}
	return dir, ca, f, r, w
}

func TestReloadAfterRename(t *testing.T) {
	dir, ca, _, r, w := watchedNode(t)
	old := r.Leaf().SerialNumber
	cert, key := issue(t, ca, nodeSpec("n1"))
	if err := WriteFiles(dir, "n1", cert, key, true); err != nil {
		t.Fatal(err)
	}
	if got, want := r.current().cert.Leaf.SerialNumber, parseLeaf(t, cert).SerialNumber; got.Cmp(want) != 0 {
		t.Fatalf("serial after the rename = %v, want the new %v (old %v)", got, want, old)
	}
	if w.count() != 0 {
		t.Fatalf("warned %v on a good rotation", w.msgs)
	}
}

func TestHalfReplacedPairKeepsTheOldAndWarnsOnce(t *testing.T) {
	_, ca, f, r, w := watchedNode(t)
	old := r.Leaf().SerialNumber
	cert, key := issue(t, ca, nodeSpec("n1"))
	replace(t, f.Cert, cert) // the key is not replaced yet
	for range 5 {
		if got := r.current().cert.Leaf.SerialNumber; got.Cmp(old) != 0 {
			t.Fatalf("serial = %v with a new cert and the old key, want the old %v", got, old)
		}
	}
	if w.count() != 1 {
		t.Fatalf("warned %d times for one bad set, want once: %v", w.count(), w.msgs)
	}
	replace(t, f.Key, key)
	if got, want := r.current().cert.Leaf.SerialNumber, parseLeaf(t, cert).SerialNumber; got.Cmp(want) != 0 {
		t.Fatalf("serial once the key is replaced = %v, want %v", got, want)
	}
	if w.count() != 1 {
		t.Fatalf("warned again once the set is good: %v", w.msgs)
	}
}

func TestCorruptFileKeepsTheOldAndWarnsOncePerSet(t *testing.T) {
	dir, ca, f, r, w := watchedNode(t)
	before := r.current()
	good := mustRead(t, f.CA)
	for i, bad := range [][]byte{[]byte("not pem"), good[:len(good)/2]} {
		replace(t, f.CA, bad)
		for range 3 {
			if s := r.current(); s != before {
				t.Fatalf("corrupt CA file %d replaced the snapshot", i)
			}
		}
		if w.count() != i+1 {
			t.Fatalf("after corrupt file %d warned %d times, want %d: %v", i, w.count(), i+1, w.msgs)
		}
	}
	os.Remove(f.Key)
	r.current()
	r.current()
	if w.count() != 3 {
		t.Fatalf("a missing key warned %d times in all, want 3: %v", w.count(), w.msgs)
	}
	if s := r.current(); s != before {
		t.Fatal("a missing key replaced the snapshot")
	}
	writeSet(t, dir, ca, nodeSpec("n1"))
	if s := r.current(); s == before {
		t.Fatal("a good set after the bad ones was not loaded")
	}
}

// countingStat is os.Stat that counts its calls.
type countingStat struct{ n atomic.Int64 }

func (c *countingStat) stat(p string) (os.FileInfo, error) {
	c.n.Add(1)
	return os.Stat(p)
}

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

func TestNoStatWithinCheckEvery(t *testing.T) {
	f := writeSet(t, t.TempDir(), newCA(t), nodeSpec("n1"))
	var st countingStat
	clock := &fakeClock{}
	clock.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	const every = time.Minute
	r, err := Load(f, Options{CheckEvery: every, stat: st.stat, now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	if n := st.n.Load(); n != 3 {
		t.Fatalf("Load stat %d files, want 3", n)
	}
	srv := r.Server(Require, false)
	for range 50 {
		r.Client()
		r.Leaf()
		if _, err := srv.GetConfigForClient(&tls.ClientHelloInfo{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.add(every - 1)
	r.current()
	if n := st.n.Load(); n != 3 {
		t.Fatalf("%d stats within CheckEvery of the last look, want none after Load's 3", n-3)
	}
	clock.add(1) // exactly CheckEvery after the last look
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				r.current()
			}
		})
	}
	wg.Wait()
	if n := st.n.Load(); n != 6 {
		t.Fatalf("%d stats at CheckEvery from many goroutines, want one look (3)", n-3)
	}
}

func TestCheckEveryDefault(t *testing.T) {
	f := writeSet(t, t.TempDir(), newCA(t), nodeSpec("n1"))
	r, err := Load(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.every != DefaultCheckEvery {
		t.Fatalf("CheckEvery 0 gave %s, want %s", r.every, DefaultCheckEvery)
	}
}

func TestParseClientAuth(t *testing.T) {
	for in, want := range map[string]ClientAuth{
		"": Require, "require": Require, "request": Request, "none": None, " None ": None, "REQUIRE": Require,
	} {
		got, err := ParseClientAuth(in)
		if err != nil || got != want {
			t.Errorf("ParseClientAuth(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, a := range []ClientAuth{Require, Request, None} {
		if back, err := ParseClientAuth(a.String()); err != nil || back != a {
			t.Errorf("ParseClientAuth(%q) = %v, %v; want %v", a.String(), back, err, a)
		}
	}
	_, err := ParseClientAuth("optional")
	if !errors.Is(err, ErrBadClientAuth) {
		t.Fatalf("ParseClientAuth(optional) = %v, want ErrBadClientAuth", err)
	}
	for _, v := range []string{"none", "request", "require", "optional"} {
		if !bytes.Contains([]byte(err.Error()), []byte(v)) {
			t.Errorf("the error %q does not name %q", err, v)
		}
	}
	for a, want := range map[ClientAuth]tls.ClientAuthType{
		Require: tls.RequireAndVerifyClientCert, Request: tls.VerifyClientCertIfGiven, None: tls.NoClientCert, 7: tls.RequireAndVerifyClientCert,
	} {
		if got := a.tlsType(); got != want {
			t.Errorf("%v.tlsType() = %v, want %v", a, got, want)
		}
	}
}

func TestNodesOnlyCheck(t *testing.T) {
	ca := newCA(t)
	node, _ := issue(t, ca, nodeSpec("n1"))
	client, _ := issue(t, ca, Spec{CN: "app"})
	if err := checkNode(parseLeaf(t, node)); err != nil {
		t.Errorf("a node certificate: %v", err)
	}
	if err := checkNode(parseLeaf(t, client)); !errors.Is(err, ErrNotNode) {
		t.Errorf("a client certificate: %v, want ErrNotNode", err)
	}
	if err := verifyNode(tls.ConnectionState{}); !errors.Is(err, ErrNotNode) {
		t.Errorf("no certificate: %v, want ErrNotNode", err)
	}
}

func TestServerAndClientConfigs(t *testing.T) {
	f := writeSet(t, t.TempDir(), newCA(t), nodeSpec("n1"))
	r, err := Load(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		auth      ClientAuth
		nodesOnly bool
		want      tls.ClientAuthType
	}{
		{Require, false, tls.RequireAndVerifyClientCert},
		{Request, false, tls.VerifyClientCertIfGiven},
		{None, false, tls.NoClientCert},
		{None, true, tls.RequireAndVerifyClientCert},
		{Request, true, tls.RequireAndVerifyClientCert},
	} {
		outer := r.Server(tc.auth, tc.nodesOnly)
		if outer.MinVersion != tls.VersionTLS13 || !outer.SessionTicketsDisabled {
			t.Errorf("%v/%v: the outer config allows TLS < 1.3 or tickets", tc.auth, tc.nodesOnly)
		}
		c, err := outer.GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientAuth != tc.want || c.MinVersion != tls.VersionTLS13 || !c.SessionTicketsDisabled ||
			c.ClientCAs == nil || len(c.Certificates) != 1 || (c.VerifyConnection != nil) != tc.nodesOnly {
			t.Errorf("%v/%v: config %+v", tc.auth, tc.nodesOnly, c)
		}
	}
	c := r.Client()
	if c.MinVersion != tls.VersionTLS13 || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "" {
		t.Errorf("client config %+v", c)
	}

	// A client with the CA alone.
	r, err = Load(Files{CA: f.CA}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Client(); c.RootCAs == nil || len(c.Certificates) != 0 {
		t.Errorf("CA-only client config %+v", c)
	}
	if r.Leaf() != nil {
		t.Error("a CA-only Reloader has a leaf")
	}
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
