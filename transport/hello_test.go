package transport

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/tlsconf"
)

func TestHelloLimits(t *testing.T) {
	name, secret := strings.Repeat("a", limits.MaxName), strings.Repeat("s", MaxSecret)
	for _, c := range []struct {
		what string
		q    HelloRequest
		ok   bool
	}{
		{"both at their limits", HelloRequest{App: name, Secret: secret}, true},
		{"both just under", HelloRequest{App: name[1:], Secret: secret[1:]}, true},
		{"empty", HelloRequest{}, true}, // the node refuses it, not the decoder
		{"app just over", HelloRequest{App: name + "a", Secret: secret}, false},
		{"secret just over", HelloRequest{App: name, Secret: secret + "s"}, false},
	} {
		got, err := DecodeHelloRequest(c.q.Encode())
		if (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.what, err, c.ok)
			continue
		}
		if err != nil {
			if CodeOf(err) != Invalid {
				t.Errorf("%s: %v is not INVALID", c.what, err)
			}
			continue
		}
		if *got != c.q {
			t.Errorf("%s: decoded %+v", c.what, got)
		}
	}
	if _, err := DecodeHelloRequest(append((&HelloRequest{App: "a"}).Encode(), 0)); err == nil {
		t.Error("trailing bytes accepted")
	}
}

// helloServer answers Hello by recording the application as the
// connection's identity, refusing the secret "wrong", and answers any
// other request with the identity its connection holds.
func helloServer(t *testing.T, s *Server) string {
	s.Handler = func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
		peer := PeerOf(ctx)
		if peer == nil {
			return nil, Errorf(Internal, "no peer")
		}
		if typ == TypeHello {
			q, err := DecodeHelloRequest(p)
			if err != nil {
				return nil, err
			}
			if q.Secret == "wrong" {
				return nil, Errorf(Unauthenticated, "wrong secret for %s", q.App)
			}
			peer.SetIdentity(q.App)
			return nil, nil
		}
		id, _ := peer.Identity().(string)
		cn := ""
		if peer.Certificate != nil {
			cn = peer.Certificate.Subject.CommonName
		}
		return []byte(id + "|" + cn + "|" + peer.Addr), nil
	}
	return serve(t, s, nil)
}

// TestDialerSaysHello: a Dialer with credentials says Hello before Dial
// returns, so the connection's first request already carries the
// identity; a refusal fails the dial with its code, and the group client
// does not retry it.
func TestDialerSaysHello(t *testing.T) {
	addr := helloServer(t, &Server{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dialer{Credentials: &Credentials{App: "billing", Secret: "s"}}.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Call(ctx, TypeStatus, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(string(b), "|"); got[0] != "billing" || !strings.HasPrefix(got[2], "127.0.0.1:") {
		t.Fatalf("the request saw identity and peer %q", b)
	}
	plain, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if b, err := plain.Call(ctx, TypeStatus, nil); err != nil || !strings.HasPrefix(string(b), "|") {
		t.Fatalf("a connection without Hello has identity %q (%v)", b, err)
	}

	_, err = Dialer{Credentials: &Credentials{App: "billing", Secret: "wrong"}}.Dial(ctx, addr)
	if CodeOf(err) != Unauthenticated {
		t.Fatalf("a refused hello: %v", err)
	}
	gc, err := Dialer{Credentials: &Credentials{App: "billing", Secret: "wrong"}}.NewLeaderClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	var e *Error
	if _, err := gc.Call(ctx, TypeStatus, nil); !errors.As(err, &e) || e.Code != Unauthenticated || ctx.Err() != nil {
		t.Fatalf("the group client: %v, want UNAUTHENTICATED at once", err)
	}
}

// TestPeerCertificate: over TLS a handler sees the client's verified
// certificate; without one, none.
func TestPeerCertificate(t *testing.T) {
	ca := newTestCA(t)
	s := &Server{TLS: loadTLS(t, ca, ca, nodeSpec("n1")).Server(tlsconf.Request, false)}
	addr := helloServer(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		d      Dialer
		wantCN string
	}{
		{dialerOf(loadTLS(t, ca, ca, tlsconf.Spec{CN: "app-1"})), "app-1"},
		{dialerOf(loadTLS(t, ca, nil, tlsconf.Spec{})), ""},
	} {
		conn, err := c.d.Dial(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		b, err := conn.Call(ctx, TypeStatus, nil)
		conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Split(string(b), "|")[1]; got != c.wantCN {
			t.Fatalf("the handler saw certificate %q, want %q", got, c.wantCN)
		}
	}
}

// TestRejectionText: a message's rejection carries its code, which the
// client reads back; a text naming no code is no *Error.
func TestRejectionText(t *testing.T) {
	e := Errorf(PermissionDenied, "application billing may not send to subject payments: really")
	text := RejectionText(e)
	if text != "PERMISSION_DENIED: application billing may not send to subject payments: really" {
		t.Fatalf("text %q", text)
	}
	back := ParseRejection(text)
	if back == nil || back.Code != PermissionDenied || back.Message != e.Message {
		t.Fatalf("read back %+v", back)
	}
	for _, s := range []string{"delivery time too far", "OK: fine", "NOPE: x", "PERMISSION_DENIED"} {
		if ParseRejection(s) != nil {
			t.Errorf("%q read as a coded rejection", s)
		}
	}
	if RejectionText(errors.New("plain")) != "plain" {
		t.Error("a plain error's text changed")
	}
}

// TestNoSecretInTheClear: a Dialer with credentials and without TLS
// dials loopback (a dev node) but refuses any other address before
// connecting, and a group client returns that at once.
func TestNoSecretInTheClear(t *testing.T) {
	d := Dialer{Credentials: &Credentials{App: "billing", Secret: "s"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, addr := range []string{"10.0.0.1:6222", "example.com:6222", "[2001:db8::1]:6222", "0.0.0.0:6222"} {
		if _, err := d.Dial(ctx, addr); !errors.Is(err, ErrPlaintextSecret) {
			t.Errorf("dial %s with a secret and no TLS: %v", addr, err)
		}
	}
	gc, err := d.NewLeaderClient([]string{"10.0.0.1:6222"})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if _, err := gc.Call(ctx, TypeStatus, nil); !errors.Is(err, ErrPlaintextSecret) || ctx.Err() != nil {
		t.Fatalf("a group client: %v, want ErrPlaintextSecret at once", err)
	}
	addr := helloServer(t, &Server{})
	if c, err := d.Dial(ctx, addr); err != nil {
		t.Fatalf("loopback %s: %v", addr, err)
	} else {
		c.Close()
	}
}
