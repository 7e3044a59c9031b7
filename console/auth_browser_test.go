package console_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// secureFixture is a metaserver and a broker group g1 with TLS and
// authentication, an admin client of them holding a node certificate
// (an operator on a node's host), and the console's API served over
// httptest, reaching the cluster without a client certificate as the
// node's HTTP port does.
type secureFixture struct {
	a      *admin.Client
	srv    *httptest.Server
	broker string      // g1's client address
	tls    *tls.Config // trusts the cluster's CA, presents no certificate
}

func startSecure(t *testing.T) *secureFixture {
	t.Helper()
	ca, err := tlsconf.NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := ca.Write(dir); err != nil {
		t.Fatal(err)
	}
	issue := func(name string) server.TLSConfig {
		t.Helper()
		cert, key, err := ca.Issue(tlsconf.Spec{CN: name, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: true})
		if err != nil {
			t.Fatal(err)
		}
		c := server.TLSConfig{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, name+".pem"),
			KeyFile: filepath.Join(dir, name+"-key.pem"), ReloadCheck: -1, ClientAuth: "request"}
		if err := os.WriteFile(c.CertFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.KeyFile, key, 0o600); err != nil {
			t.Fatal(err)
		}
		return c
	}
	m := testcluster.Meta(t, func(c *server.MetaConfig) { c.TLS, c.Auth = issue("m1"), true })
	b := testcluster.Broker(t, func(c *server.Config) {
		testcluster.Registered("g1", m.ClientAddr())(c)
		c.TLS, c.Auth = issue("g1-n1"), true
	})
	op := issue("operator")
	a, err := admin.New(m.ClientAddr(), qmq.WithTLS(qmq.TLSFiles{CA: op.CAFile, Cert: op.CertFile, Key: op.KeyFile}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	poll.Until(t, 30*time.Second, "g1 registered with a leader", func() bool {
		c, err := a.Cluster(context.Background())
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader != ""
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	f := &secureFixture{a: a, broker: b.ClientAddr(), tls: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}}
	h, err := console.New(console.Config{Servers: []string{b.ClientAddr()}, ConnOptions: []qmq.ConnOption{qmq.WithTLSConfig(f.tls)},
		Auth: true, Logger: testcluster.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// app creates an application and returns its secret once the broker
// knows it.
func (f *secureFixture) app(t *testing.T, spec admin.AppSpec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	secret, err := f.a.CreateApp(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

// TestBrowserAsAnApplication: an application that is not an admin logs
// in to the console: the pages it may read show (its consumer group, its
// message and the message's timeline), a page it may not read and an
// action it may not take say that the application is not allowed, in
// the cluster's words, and the action changes nothing.
func TestBrowserAsAnApplication(t *testing.T) {
	f := startSecure(t)
	secret := f.app(t, admin.AppSpec{Code: "billing", Send: []string{"orders"}, Consume: []admin.ConsumeGrant{{Subject: "orders", ConsumerGroup: "billing"}}})
	as := qmq.WithTLSConfig(f.tls).And(qmq.WithApp("billing", secret))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(f.broker, as)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	m := p.GenerateMessage("orders")
	m.SetBody([]byte("paid"))
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	c, err := qmq.NewPuller(f.broker, "orders", "billing", as, qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []*qmq.Message
	for len(got) == 0 {
		if got, err = c.Pull(ctx, 1, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}

	bctx, problems := browser(t)
	text := func(sel string) string {
		t.Helper()
		var s string
		wctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Run(wctx, chromedp.WaitVisible(sel, chromedp.BySearch), chromedp.Text("#main", &s, chromedp.ByQuery)); err != nil {
			var html string
			chromedp.Run(bctx, chromedp.OuterHTML("body", &html, chromedp.ByQuery))
			t.Fatalf("waiting for %s: %v\n%s", sel, err, html)
		}
		return s
	}
	if err := chromedp.Run(bctx, chromedp.Navigate(f.srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(bctx, 20*time.Second)
	defer lcancel()
	err = chromedp.Run(lctx,
		chromedp.WaitVisible("#login-form", chromedp.ByQuery),
		chromedp.SendKeys(`#login-form input[name="code"]`, "billing", chromedp.ByQuery),
		chromedp.SendKeys(`#login-form input[name="secret"]`, secret, chromedp.ByQuery),
		chromedp.Click(`#login-form button[type="submit"]`, chromedp.ByQuery))
	if err != nil {
		var html string
		chromedp.Run(bctx, chromedp.OuterHTML("body", &html, chromedp.ByQuery))
		t.Fatalf("logging in: %v\n%s", err, html)
	}
	if s := text(`//h2[contains(., "Cluster health")] | //*[@id="error"]`); !strings.Contains(s, "Broker group g1") {
		t.Errorf("the cluster page as billing:\n%s", s)
	}
	go1 := func(hash string) {
		t.Helper()
		if err := chromedp.Run(bctx, chromedp.Evaluate(fmt.Sprintf("location.hash = %q", hash), nil)); err != nil {
			t.Fatal(err)
		}
	}
	go1("#group?subject=orders&group=billing")
	if s := text(`//h2[contains(., "billing of orders")] | //*[@id="error"]`); !strings.Contains(s, "Reset") {
		t.Errorf("the consumer group's page as billing:\n%s", s)
	}
	var result string
	err = chromedp.Run(bctx,
		chromedp.Evaluate(`window.confirm = () => true`, nil),
		chromedp.Click(`#reset-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#action-result.error`, chromedp.ByQuery),
		chromedp.Text("#action-result", &result, chromedp.ByQuery))
	if err != nil {
		t.Fatalf("a reset as billing: %v", err)
	}
	if !strings.Contains(result, "Not allowed for this application: ") || !strings.Contains(result, "application billing is not an admin") {
		t.Errorf("a refused reset says %q", result)
	}
	v, err := f.a.ConsumerGroup(ctx, "orders", "billing")
	if err != nil || v.Total.Lag != 0 || v.Total.Backlog != 0 {
		t.Errorf("the group after a refused reset: %+v, %v", v.Total, err)
	}
	go1("#dead?subject=orders&group=billing")
	if s := text(`//h2[contains(., "Dead letters of billing")] | //*[@id="error"]`); !strings.Contains(s, "Dead letters of billing of orders") {
		t.Errorf("the dead letters' page as billing:\n%s", s)
	}
	go1("#dead?subject=orders&group=shipping")
	if s := text(`//*[@id="error"]`); !strings.Contains(s, "Not allowed for this application: ") || !strings.Contains(s, "may not consume subject orders as consumer group shipping") {
		t.Errorf("another group's dead letters as billing:\n%s", s)
	}
	go1("#messages?id=" + m.ID())
	if s := text(`//*[@id="message-result"]/*`); !strings.Contains(s, "Message "+m.ID()+" of orders") || !strings.Contains(s, "paid") {
		t.Errorf("billing's message:\n%s", s)
	}
	for _, p := range problems() {
		t.Errorf("browser: %s", p)
	}
}
