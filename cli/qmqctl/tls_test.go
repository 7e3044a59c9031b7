package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/test/testbroker"
)

// readCert parses the certificate in path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifies reports whether cert chains to the CA in dir for usage.
func verifies(t *testing.T, dir string, cert *x509.Certificate, usage x509.ExtKeyUsage) bool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, "ca.pem")))
	_, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err == nil
}

// mode is path's permission bits.
func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestTLSInit: `tls init` makes a CA, node and client certificates with
// the right uses and addresses, keys readable by their owner only; it
// overwrites nothing without --force (writing nothing at all when one
// file exists), never the CA, and adds certificates of the same CA later.
func TestTLSInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := runCLI("tls", "init", "--dir", dir, "--node", "n1=127.0.0.1,::1,n1.example.com", "--client", "app")
	if err != nil {
		t.Fatalf("tls init: %v\n%s", err, out)
	}
	for _, want := range []string{"made a CA", "--tls-cert " + filepath.Join(dir, "n1.pem"), "--tls-key " + filepath.Join(dir, "app-key.pem")} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for file, want := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "n1.pem": 0o644, "n1-key.pem": 0o600,
		"app.pem": 0o644, "app-key.pem": 0o600} {
		if got := mode(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s has mode %o, want %o", file, got, want)
		}
	}
	if got := mode(t, dir); got != 0o700 {
		t.Errorf("the directory has mode %o, want 700", got)
	}
	n1 := readCert(t, filepath.Join(dir, "n1.pem"))
	if !verifies(t, dir, n1, x509.ExtKeyUsageServerAuth) || !verifies(t, dir, n1, x509.ExtKeyUsageClientAuth) {
		t.Error("the node certificate does not verify for both serverAuth and clientAuth")
	}
	if err := n1.VerifyHostname("::1"); err != nil {
		t.Error(err)
	}
	if err := n1.VerifyHostname("n1.example.com"); err != nil {
		t.Error(err)
	}
	if !n1.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("node IPs %v", n1.IPAddresses)
	}
	app := readCert(t, filepath.Join(dir, "app.pem"))
	if !verifies(t, dir, app, x509.ExtKeyUsageClientAuth) || verifies(t, dir, app, x509.ExtKeyUsageServerAuth) {
		t.Error("the client certificate is not for clientAuth only")
	}
	// The files load as a node's and as a client's.
	if _, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n1.pem"), Key: filepath.Join(dir, "n1-key.pem")}, tlsconf.Options{}); err != nil {
		t.Fatal(err)
	}

	snapshot := func() map[string][]byte {
		files := map[string][]byte{}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
		return files
	}
	before := snapshot()
	// An existing node's files, even beside a new one: nothing is written.
	if out, err := runCLI("tls", "init", "--dir", dir, "--node", "n2=127.0.0.2", "--node", "n1=127.0.0.1"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("init over existing files: %v\n%s", err, out)
	}
	if after := snapshot(); len(after) != len(before) {
		t.Fatalf("a refused init wrote files: %d before, %d after", len(before), len(after))
	}
	for name, b := range snapshot() {
		if !bytes.Equal(b, before[name]) {
			t.Fatalf("a refused init changed %s", name)
		}
	}

	// A new node later: the same CA.
	if out, err := runCLI("tls", "init", "--dir", dir, "--node", "n2=127.0.0.2"); err != nil || !strings.Contains(out, "using the CA") {
		t.Fatalf("adding a node: %v\n%s", err, out)
	}
	n2 := readCert(t, filepath.Join(dir, "n2.pem"))
	if !verifies(t, dir, n2, x509.ExtKeyUsageServerAuth) {
		t.Error("a node added later does not verify against the first CA")
	}
	// --force replaces a node's files, never the CA's.
	if out, err := runCLI("tls", "init", "--dir", dir, "--node", "n1=127.0.0.1", "--force"); err != nil {
		t.Fatalf("--force: %v\n%s", err, out)
	}
	after := snapshot()
	if bytes.Equal(after["n1.pem"], before["n1.pem"]) || bytes.Equal(after["n1-key.pem"], before["n1-key.pem"]) {
		t.Error("--force did not replace n1's files")
	}
	if !bytes.Equal(after["ca.pem"], before["ca.pem"]) || !bytes.Equal(after["ca-key.pem"], before["ca-key.pem"]) {
		t.Error("the CA changed")
	}
	if got := mode(t, filepath.Join(dir, "n1-key.pem")); got != 0o600 {
		t.Errorf("the replaced key has mode %o", got)
	}
}

// TestTLSInitRefuses: bad requests are refused before anything is written.
func TestTLSInitRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no address", []string{"--node", "n1"}, "ID=ADDR"},
		{"empty address list", []string{"--node", "n1="}, "ID=ADDR"},
		{"empty address", []string{"--node", "n1=127.0.0.1,"}, "empty address"},
		{"no id", []string{"--node", "=127.0.0.1"}, "cannot name a file"},
		{"a path", []string{"--client", "../app"}, "cannot name a file"},
		{"a name twice", []string{"--node", "x=127.0.0.1", "--client", "x"}, "twice"},
		{"the CA's name", []string{"--client", "ca"}, "twice, or is the CA's"},
		{"no days", []string{"--days", "0"}, "--days"},
		{"an argument", []string{"extra"}, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			out, err := runCLI(append([]string{"tls", "init", "--dir", dir}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q\n%s", err, tc.want, out)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("a refused init made %s: %v", dir, err)
			}
		})
	}
	// A CA half there is not replaced.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI("tls", "init", "--dir", dir, "--client", "app"); err == nil || !strings.Contains(err.Error(), "not the other") {
		t.Fatalf("a CA without its key: %v", err)
	}
}

// runProbe runs qmqctl with args before a command that records the TLS
// files its connection would use.
func runProbe(t *testing.T, args ...string) qmq.TLSFiles {
	t.Helper()
	app := newApp()
	var got qmq.TLSFiles
	app.Commands = append(app.Commands, &cli.Command{Name: "probe", Action: func(c *cli.Context) error {
		got = tlsFiles(c)
		return nil
	}})
	if err := app.Run(append(append([]string{"qmqctl"}, args...), "probe")); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestTLSFlagsAndEnv: the global --tls-* flags, or QMQ_TLS_* when a flag
// is not given, name the files every command connects with.
func TestTLSFlagsAndEnv(t *testing.T) {
	if got := runProbe(t); got != (qmq.TLSFiles{}) {
		t.Fatalf("with neither: %+v, want none (plaintext)", got)
	}
	want := qmq.TLSFiles{CA: "ca.pem", Cert: "c.pem", Key: "k.pem"}
	if got := runProbe(t, "--tls-ca", "ca.pem", "--tls-cert", "c.pem", "--tls-key", "k.pem"); got != want {
		t.Fatalf("flags: %+v, want %+v", got, want)
	}
	t.Setenv("QMQ_TLS_CA", "env-ca.pem")
	t.Setenv("QMQ_TLS_CERT", "env-c.pem")
	t.Setenv("QMQ_TLS_KEY", "env-k.pem")
	if got := runProbe(t); got != (qmq.TLSFiles{CA: "env-ca.pem", Cert: "env-c.pem", Key: "env-k.pem"}) {
		t.Fatalf("env: %+v", got)
	}
	if got := runProbe(t, "--tls-ca", "ca.pem"); got != (qmq.TLSFiles{CA: "ca.pem", Cert: "env-c.pem", Key: "env-k.pem"}) {
		t.Fatalf("a flag over the env: %+v", got)
	}
}

// TestTLSSendAndConsume: with the TLS flags (or their env vars) send and
// consume reach a node that requires TLS; without them they are refused.
func TestTLSSendAndConsume(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if out, err := runCLI("tls", "init", "--dir", dir, "--node", "n1=127.0.0.1", "--client", "app"); err != nil {
		t.Fatalf("tls init: %v\n%s", err, out)
	}
	node, err := tlsconf.Load(tlsconf.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n1.pem"), Key: filepath.Join(dir, "n1-key.pem")}, tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := testbroker.Start(t, node.Server(tlsconf.Require, false))
	flags := []string{"--server", b.Addr, "--tls-ca", filepath.Join(dir, "ca.pem"),
		"--tls-cert", filepath.Join(dir, "app.pem"), "--tls-key", filepath.Join(dir, "app-key.pem")}

	if out, err := runCLI(append(flags, "send", "--subject", "orders", "--timeout", "10s", "hello")...); err != nil || b.Sent() != 1 {
		t.Fatalf("send with the TLS flags: %v (%d stored)\n%s", err, b.Sent(), out)
	}
	if out, err := runCLI("--server", b.Addr, "send", "--subject", "orders", "--timeout", "10s", "plain"); err == nil || b.Sent() != 1 {
		t.Fatalf("send without TLS: %v (%d stored)\n%s", err, b.Sent(), out)
	}
	// consume prints to stdout, which runCLI does not capture: it must end
	// well after its one message.
	if out, err := runCLI(append(flags, "consume", "--subject", "orders", "--group", "g", "--start", "earliest", "--count", "1", "--timeout", "10s")...); err != nil {
		t.Fatalf("consume with the TLS flags: %v\n%s", err, out)
	}
	t.Setenv("QMQ_TLS_CA", filepath.Join(dir, "ca.pem"))
	t.Setenv("QMQ_TLS_CERT", filepath.Join(dir, "app.pem"))
	t.Setenv("QMQ_TLS_KEY", filepath.Join(dir, "app-key.pem"))
	if out, err := runCLI("--server", b.Addr, "send", "--subject", "orders", "--timeout", "10s", "env"); err != nil || b.Sent() != 2 {
		t.Fatalf("send with QMQ_TLS_*: %v (%d stored)\n%s", err, b.Sent(), out)
	}
	t.Setenv("QMQ_TLS_KEY", filepath.Join(dir, "missing-key.pem"))
	if out, err := runCLI("--server", b.Addr, "send", "--subject", "orders", "--timeout", "10s", "bad key"); err == nil || !strings.Contains(err.Error(), "missing-key.pem") {
		t.Fatalf("send with a missing key file: %v\n%s", err, out)
	}
}

// TestEverySDKClientConnectsWithTheTLSFlags: every call in qmqctl that
// makes an SDK client (qmq.NewProducer, qmq.NewPuller, qmq.Subscribe,
// admin.New) is
// given the connection option: connOption(c), or a config's conn field
// that carries it.
func TestEverySDKClientConnectsWithTheTLSFlags(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The option lists built in a function: opts := []qmq.PullerOption{cfg.conn, …}.
		ast.Inspect(f, func(n ast.Node) bool {
			fn, ok := n.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				return true
			}
			withConn := map[string]bool{}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 && carriesConn(as.Rhs[0]) {
					if id, ok := as.Lhs[0].(*ast.Ident); ok {
						withConn[id.Name] = true
					}
				}
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, isIdent := sel.X.(*ast.Ident)
				if !isIdent || !slices.Contains(sdkClients[x.Name], sel.Sel.Name) {
					return true
				}
				calls++
				if !slices.ContainsFunc(call.Args, func(a ast.Expr) bool {
					id, ok := a.(*ast.Ident)
					return carriesConn(a) || ok && withConn[id.Name]
				}) {
					t.Errorf("%s: %s.%s is not given the connection option", fset.Position(call.Pos()), x.Name, sel.Sel.Name)
				}
				return true
			})
			return false
		})
	}
	if calls < 8 {
		t.Fatalf("found %d SDK client calls; the check no longer sees them", calls)
	}
}

// sdkClients are the SDK's functions that make a client, by package.
var sdkClients = map[string][]string{"qmq": {"NewProducer", "NewPuller", "Subscribe"}, "admin": {"New"}}

// carriesConn reports whether e is connOption(…), a .conn field, or an
// option list or append that holds one.
func carriesConn(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.CallExpr:
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "connOption" {
			return true
		}
		if id, ok := e.Fun.(*ast.Ident); ok && id.Name == "append" {
			return slices.ContainsFunc(e.Args[1:], carriesConn)
		}
	case *ast.SelectorExpr:
		return e.Sel.Name == "conn"
	case *ast.CompositeLit:
		return slices.ContainsFunc(e.Elts, carriesConn)
	}
	return false
}

// TestStatusSecurityColumn: status marks a node that serves plaintext off
// loopback, and tells TLS from plaintext on loopback.
func TestStatusSecurityColumn(t *testing.T) {
	for _, tt := range []struct {
		tls, insecure bool
		want          string
	}{{true, false, "on"}, {false, false, "off"}, {false, true, "INSECURE!"}} {
		if got := security(tt.tls, tt.insecure); got != tt.want {
			t.Errorf("tls %v, insecure %v: %q, want %q", tt.tls, tt.insecure, got, tt.want)
		}
	}
}
