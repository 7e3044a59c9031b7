package qmq_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/test/testbroker"
	"github.com/qmqgo/qmq/transport"
)

// A ConnOption is an option of every constructor: the build fails if it
// no longer is.
var (
	_ qmq.ProducerOption  = qmq.WithTLS(qmq.TLSFiles{})
	_ qmq.PullerOption    = qmq.WithTLS(qmq.TLSFiles{})
	_ qmq.SubscribeOption = qmq.WithTLSConfig(nil)
	_ qmq.ConsumerOption  = qmq.ConnOption{}
)

// tlsDir holds a CA, a node certificate valid for 127.0.0.1 and a client
// certificate, as `qmqctl tls init` writes them.
type tlsDir struct {
	dir string
	ca  *tlsconf.CA
}

func newTLSDir(t *testing.T) tlsDir {
	t.Helper()
	ca, err := tlsconf.NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	d := tlsDir{dir: t.TempDir(), ca: ca}
	if err := ca.Write(d.dir); err != nil {
		t.Fatal(err)
	}
	d.issue(t, "n1", tlsconf.Spec{CN: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: true})
	d.issue(t, "app", tlsconf.Spec{CN: "app"})
	return d
}

func (d tlsDir) issue(t *testing.T, name string, s tlsconf.Spec) {
	t.Helper()
	cert, key, err := d.ca.Issue(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsconf.WriteFiles(d.dir, name, cert, key, false); err != nil {
		t.Fatal(err)
	}
}

// files names the CA and name's certificate and key.
func (d tlsDir) files(name string) qmq.TLSFiles {
	return qmq.TLSFiles{CA: filepath.Join(d.dir, "ca.pem"), Cert: filepath.Join(d.dir, name+".pem"), Key: filepath.Join(d.dir, name+"-key.pem")}
}

// constructors builds each client the package has with opt, closing what
// it made, and names them.
var constructors = map[string]func(servers string, opt qmq.ConnOption) error{
	"NewProducer": func(s string, opt qmq.ConnOption) error {
		p, err := qmq.NewProducer(s, opt)
		if err == nil {
			p.Close()
		}
		return err
	},
	"NewPuller": func(s string, opt qmq.ConnOption) error {
		p, err := qmq.NewPuller(s, "orders", "g", opt)
		if err == nil {
			p.Close()
		}
		return err
	},
	"Subscribe": func(s string, opt qmq.ConnOption) error {
		sub, err := qmq.Subscribe(s, "orders", "g", func(context.Context, *qmq.Message) error { return nil }, opt,
			qmq.WithPullWait(100*time.Millisecond), qmq.WithLogger(nil))
		if err == nil {
			sub.Close()
		}
		return err
	},
	"admin.New": func(s string, opt qmq.ConnOption) error {
		a, err := admin.New(s, opt)
		if err == nil {
			a.Close()
		}
		return err
	},
}

// TestWithTLSBadFilesFailEveryConstructor: files that do not load fail
// NewProducer, NewPuller, Subscribe and admin.New, with the reason.
func TestWithTLSBadFilesFailEveryConstructor(t *testing.T) {
	d := newTLSDir(t)
	corrupt := filepath.Join(d.dir, "corrupt.pem")
	if err := os.WriteFile(corrupt, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n1, app := d.files("n1"), d.files("app")
	for _, tc := range []struct {
		name  string
		files qmq.TLSFiles
		want  error // nil: any error
	}{
		{"a missing CA file", qmq.TLSFiles{CA: filepath.Join(d.dir, "none.pem")}, fs.ErrNotExist},
		{"no CA file", qmq.TLSFiles{Cert: app.Cert, Key: app.Key}, tlsconf.ErrIncomplete},
		{"a certificate without its key", qmq.TLSFiles{CA: app.CA, Cert: app.Cert}, tlsconf.ErrIncomplete},
		{"a key that is not the certificate's", qmq.TLSFiles{CA: app.CA, Cert: app.Cert, Key: n1.Key}, nil},
		{"a corrupt CA file", qmq.TLSFiles{CA: corrupt}, nil},
	} {
		opt := qmq.WithTLS(tc.files)
		for name, build := range constructors {
			err := build("127.0.0.1:1", opt)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("%s with %s: %v, want an error (%v)", name, tc.name, err, tc.want)
			}
		}
	}
	// The same constructors with good files succeed, or for a consumer,
	// which registers before it returns, find nothing at the address.
	for name, build := range constructors {
		if err := build("127.0.0.1:1", qmq.WithTLS(d.files("app"))); err != nil && !errors.Is(err, qmq.ErrUnreachable) {
			t.Errorf("%s with good files: %v", name, err)
		}
	}
}

// startTLSBroker serves a test broker over TLS with d's node
// certificate, requiring client certificates of d's CA.
func startTLSBroker(t *testing.T, d tlsDir) *testbroker.Broker {
	t.Helper()
	r, err := tlsconf.Load(tlsconf.Files(d.files("n1")), tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return testbroker.Start(t, r.Server(tlsconf.Require, false))
}

// TestWithTLSEndToEnd: over TLS a Producer sends, a Puller and a
// Subscription receive, and an admin.Client asks for a status; a client without
// TLS, or with another CA's files, is refused.
func TestWithTLSEndToEnd(t *testing.T) {
	d := newTLSDir(t)
	b := startTLSBroker(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn := qmq.WithTLS(d.files("app"))

	p, err := qmq.NewProducer(b.Addr, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := p.GenerateMessage("orders")
	m.SetBody([]byte("over tls"))
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatalf("send over TLS: %v", err)
	}

	pl, err := qmq.NewPuller(b.Addr, "orders", "g", conn, qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	msgs, err := pl.Pull(ctx, 10, 5*time.Second)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body()) != "over tls" {
		t.Fatalf("pull over TLS: %d messages, %v", len(msgs), err)
	}
	if err := pl.Ack(ctx, msgs[0]); err != nil {
		t.Fatalf("ack over TLS: %v", err)
	}

	got := make(chan string, 1)
	sub, err := qmq.Subscribe(b.Addr, "orders", "g2", func(_ context.Context, m *qmq.Message) error {
		select {
		case got <- string(m.Body()):
		default:
		}
		return nil
	}, conn, qmq.WithPullWait(100*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	select {
	case body := <-got:
		if body != "over tls" {
			t.Fatalf("subscription received %q", body)
		}
	case <-ctx.Done():
		t.Fatal("the subscription received nothing over TLS")
	}

	a, err := admin.New(b.Addr, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if st, err := a.Status(ctx, b.Addr); err != nil || st.ID != "n1" {
		t.Fatalf("status over TLS: %+v, %v", st, err)
	}

	// A static config is used as it is.
	r, err := tlsconf.Load(tlsconf.Files(d.files("app")), tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	static, err := qmq.NewProducer(b.Addr, qmq.WithTLSConfig(r.Client()))
	if err != nil {
		t.Fatal(err)
	}
	defer static.Close()
	if err := static.SendMessage(ctx, static.GenerateMessage("orders")); err != nil {
		t.Fatalf("send with WithTLSConfig: %v", err)
	}

	// Without TLS the port answers that it requires it; with another CA's
	// files the handshake fails. Neither is retried until the deadline.
	other := newTLSDir(t)
	for name, opts := range map[string][]qmq.ProducerOption{
		"plaintext":  nil,
		"another CA": {qmq.WithTLS(other.files("app"))},
	} {
		p, err := qmq.NewProducer(b.Addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		err = p.SendMessage(ctx, p.GenerateMessage("orders"))
		p.Close()
		if err == nil || ctx.Err() != nil {
			t.Fatalf("%s: send %v (context %v), want a refusal before the deadline", name, err, ctx.Err())
		}
		if name == "another CA" && !errors.Is(err, transport.ErrTLS) {
			t.Fatalf("%s: %v, want transport.ErrTLS", name, err)
		}
	}
}
