package server

import (
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// counterValue is the value of the counter name in reg, of its only series.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s with one series", name)
	return 0
}

// TestTLSConfigCheck: a node needs all three files, a known client auth
// mode, and no client auth mode without files.
func TestTLSConfigCheck(t *testing.T) {
	full := TLSConfig{CAFile: "ca.pem", CertFile: "n1.pem", KeyFile: "n1-key.pem"}
	with := func(f func(*TLSConfig)) TLSConfig { c := full; f(&c); return c }
	for _, tc := range []struct {
		name string
		tls  TLSConfig
		want error // nil: accepted
	}{
		{"off", TLSConfig{}, nil},
		{"all three files", full, nil},
		{"require", with(func(c *TLSConfig) { c.ClientAuth = "require" }), nil},
		{"request", with(func(c *TLSConfig) { c.ClientAuth = "request" }), nil},
		{"none", with(func(c *TLSConfig) { c.ClientAuth = "none" }), nil},
		{"an unknown mode", with(func(c *TLSConfig) { c.ClientAuth = "optional" }), tlsconf.ErrBadClientAuth},
		{"no CA", with(func(c *TLSConfig) { c.CAFile = "" }), tlsconf.ErrIncomplete},
		{"no key", with(func(c *TLSConfig) { c.KeyFile = "" }), tlsconf.ErrIncomplete},
		{"no certificate", with(func(c *TLSConfig) { c.CertFile = "" }), tlsconf.ErrIncomplete},
		{"a CA alone, as a client has", TLSConfig{CAFile: "ca.pem"}, tlsconf.ErrIncomplete},
		{"a mode without files", TLSConfig{ClientAuth: "none"}, ErrTLSConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NodeConfig{ID: "n1", DataDir: "d", ClientAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2", TLS: tc.tls}
			err := c.check("config")
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && (!errors.Is(err, tc.want) || !errors.Is(err, ErrTLSConfig)):
				t.Fatalf("error %v, want %v and %v", err, tc.want, ErrTLSConfig)
			}
		})
	}
}

// TestTLSNodeRefusesToStartWithoutItsFiles: files that do not load, or a
// client's certificate, stop a broker and a metaserver node from
// starting.
func TestTLSNodeRefusesToStartWithoutItsFiles(t *testing.T) {
	fx := newTLSFixture(t)
	fx.issue("app", tlsconf.Spec{CN: "app"})
	missing := fx.node("n1")
	missing.KeyFile = filepath.Join(fx.dir, "none.pem")
	for _, tc := range []struct {
		name string
		tls  TLSConfig
		want error
	}{
		{"a missing key file", missing, fs.ErrNotExist},
		{"a client's certificate", fx.config("app"), tlsconf.ErrNotNode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
			cfg.ClientAddr, cfg.RaftAddr, cfg.TLS = "127.0.0.1:0", freeAddr(t), tc.tls
			cfg.Logger = testLogger(t, "n1")
			if n, err := New(cfg); !errors.Is(err, tc.want) {
				if err == nil {
					n.Close()
				}
				t.Fatalf("broker: %v, want %v", err, tc.want)
			}
			mcfg := DefaultMetaConfig()
			mcfg.NodeConfig, mcfg.ID, mcfg.Logger = cfg.NodeConfig, "m1", cfg.Logger
			if m, err := NewMeta(mcfg); !errors.Is(err, tc.want) {
				if err == nil {
					m.Close()
				}
				t.Fatalf("metaserver: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestTLSClientPortRefusesPlaintext: a TLS node answers a plaintext client
// with an error that names TLS, counts the handshake in its metrics, and
// serves a client with a certificate of its CA.
func TestTLSClientPortRefusesPlaintext(t *testing.T) {
	fx := newTLSFixture(t)
	n := startNode(t, "n1", true, func(c *Config) { c.TLS = fx.node("n1") })
	waitLeader(t, n)
	ctx := ctxFor(t, 10*time.Second)

	conn, err := transport.Dial(ctx, n.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Call(ctx, transport.TypeStatus, nil)
	conn.Close()
	if err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("a plaintext status request: %v, want an error naming TLS", err)
	}
	waitFor(t, 5*time.Second, "the refused handshake counted", func() bool {
		return counterValue(t, n.metrics.registry, "qmq_client_tls_handshakes_failed_total") == 1
	})

	st, err := newAdmin(t, n.ClientAddr(), fx.client("app")).Status(ctx, n.ClientAddr())
	if err != nil || st.ID != "n1" {
		t.Fatalf("status over TLS: %+v, %v", st, err)
	}
}

// TestTLSGroupJoinsAndServes: nodes of one CA join a group over TLS (the
// leader checks each joiner at its client address), and a producer with
// a client certificate of that CA sends to it.
func TestTLSGroupJoinsAndServes(t *testing.T) {
	fx := newTLSFixture(t)
	nodes := startGroup(t, withTLS(fx))
	addrs := clientAddrs(nodes)
	p, err := qmq.NewProducer(strings.Join(addrs, ","), fx.client("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendOrders(t, p, 10)
}

// TestTLSBrokerRegistersWithTLSMeta: a TLS broker registers with a TLS
// metaserver and heartbeats it, and forwards a producer's route requests
// there, so that sends through the broker's address succeed.
func TestTLSBrokerRegistersWithTLSMeta(t *testing.T) {
	fx := newTLSFixture(t)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.TLS = fx.node("m1") })
	b := startNode(t, "g1-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat = "g1", []string{m.ClientAddr()}, 100*time.Millisecond
		c.TLS = fx.node("g1-n1")
	})
	app := fx.client("app")
	admin := newAdmin(t, m.ClientAddr(), app)
	waitFor(t, 10*time.Second, "the broker group registered and heartbeating", func() bool {
		available, _ := groupAvailable(t, admin, "g1")
		return available
	})

	p, err := qmq.NewProducer(b.ClientAddr(), app)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sendOrders(t, p, 10)
}

// TestTLSBrokerOfAnotherCANeverRegisters: a broker whose certificate and
// CA are another CA's cannot reach the metaserver: it logs ErrTLS and the
// metaserver never learns of its group.
func TestTLSBrokerOfAnotherCANeverRegisters(t *testing.T) {
	fx, other := newTLSFixture(t), newTLSFixture(t)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.TLS = fx.node("m1") })
	var logs lockedBuffer
	startNode(t, "g1-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat = "g1", []string{m.ClientAddr()}, 100*time.Millisecond
		c.TLS = other.node("g1-n1")
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(&logs, tWriter{t})})
	})
	waitFor(t, 10*time.Second, "the broker to log its refused registration", func() bool {
		s := logs.String()
		return strings.Contains(s, "registering with the metaserver") && strings.Contains(s, transport.ErrTLS.Error())
	})
	if _, known := groupAvailable(t, newAdmin(t, m.ClientAddr(), fx.client("app")), "g1"); known {
		t.Fatal("the metaserver knows the group of a broker of another CA")
	}
}

// TestTLSHTTP: a TLS node serves /status and /metrics over TLS only, with
// the client port's client auth: plaintext HTTP is answered 400, https
// without a client certificate is refused, and https with the CA and a
// client certificate works.
func TestTLSHTTP(t *testing.T) {
	fx := newTLSFixture(t)
	n := startNode(t, "n1", true, func(c *Config) { c.TLS = fx.node("n1") })
	get := func(c *http.Client, url string) (int, string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	client := func(config *tls.Config) *http.Client {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: config}}
		t.Cleanup(c.CloseIdleConnections)
		return c
	}

	if code, _, err := get(client(nil), "http://"+n.HTTPAddr()+"/status"); err != nil || code != http.StatusBadRequest {
		t.Fatalf("plaintext /status: %d, %v; want 400", code, err)
	}
	fx.issue("app", tlsconf.Spec{CN: "app"})
	noCert := fx.config("app")
	noCert.CertFile, noCert.KeyFile = "", ""
	if code, _, err := get(client(clientConfig(t, noCert)), "https://"+n.HTTPAddr()+"/status"); err == nil {
		t.Fatalf("https without a client certificate: %d, want a refused handshake", code)
	}
	app := client(clientConfig(t, fx.config("app")))
	for path, want := range map[string]string{"/status": `"id": "n1"`, "/metrics": "qmq_raft_applied_index"} {
		code, body, err := get(app, "https://"+n.HTTPAddr()+path)
		if err != nil || code != http.StatusOK || !strings.Contains(body, want) {
			t.Fatalf("https %s: %d, %v, want 200 with %q:\n%s", path, code, err, want, body)
		}
	}
}

// sendOrders sends n messages to subject orders, each acknowledged within
// 20 s, or fails the test.
func sendOrders(t *testing.T, p *qmq.Producer, n int) {
	t.Helper()
	ctx := ctxFor(t, 20*time.Second)
	for range n {
		if err := p.SendMessage(ctx, p.GenerateMessage("orders")); err != nil {
			t.Fatal(err)
		}
	}
}
