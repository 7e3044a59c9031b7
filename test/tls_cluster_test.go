package test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
)

// TestTLSCluster runs a metaserver group and a broker group of three
// processes each over TLS, behind proxies: every node's certificate names
// every IP it is dialled at, a producer and a subscription with a client
// certificate send and consume 100 messages through the proxies, `qmqctl
// status` shows every node's TLS on, and a node restarted serves TLS
// again. qmqctl without the TLS flags is refused with an error naming
// TLS.
func TestTLSCluster(t *testing.T) {
	const subject, total = "tls.orders", 100
	sec := NewSecurity(t)
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	meta.UseProxies()
	meta.UseTLS(sec)
	meta.Form("", "m1", "m2", "m3")
	g1 := NewCluster(t, "g1", "--meta", meta.ClientAddrs(), "--election-timeout", "500ms")
	g1.UseProxies()
	g1.UseTLS(sec)
	g1.Form(meta.ClientAddrs(), "a", "b", "c")
	for _, c := range []*Cluster{meta, g1} {
		for _, n := range c.Nodes() {
			certNamesAddrs(t, n)
		}
	}

	// The SDK's clients, with the client certificate.
	p, err := qmq.NewProducer(meta.ClientAddrs(), sec.ConnOption(), qmq.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var mu sync.Mutex
	received := map[string]bool{}
	sub, err := qmq.Subscribe(meta.ClientAddrs(), subject, "billing", func(_ context.Context, m *qmq.Message) error {
		mu.Lock()
		received[m.ID()] = true
		mu.Unlock()
		return nil
	}, sec.ConnOption(), qmq.StartAt(qmq.Earliest), qmq.WithPullWait(500*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var sent []string
	sendAndConsume := func(n int) {
		t.Helper()
		for i := range n {
			m := p.GenerateMessage(subject)
			m.SetBody(fmt.Appendf(nil, "message %d", len(sent)+i))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := p.SendMessage(ctx, m)
			cancel()
			if err != nil {
				t.Fatalf("sending over TLS: %v", err)
			}
			sent = append(sent, m.ID())
		}
		g1.WaitFor(30*time.Second, fmt.Sprintf("%d messages consumed over TLS", len(sent)), func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range sent {
				if !received[id] {
					return fmt.Errorf("%d of %d received; not %s", len(received), len(sent), id)
				}
			}
			return nil
		})
	}
	sendAndConsume(total)
	allTLSOn(t, meta)

	// A broker leader and a metaserver follower restarted serve TLS again.
	l, st, err := g1.Leader()
	if err != nil {
		t.Fatal(err)
	}
	l.Kill()
	g1.WaitFor(30*time.Second, "g1: a leader after "+l.ID, func() error {
		_, now, err := g1.Leader()
		if err == nil && now.Term <= st.Term {
			err = fmt.Errorf("term %d", now.Term)
		}
		return err
	})
	ml, _, err := meta.Leader()
	if err != nil {
		t.Fatal(err)
	}
	mf := meta.Nodes()[0]
	if mf == ml {
		mf = meta.Nodes()[1]
	}
	mf.Kill()
	l.Restart()
	mf.Restart()
	for _, c := range []*Cluster{meta, g1} {
		c.WaitFor(30*time.Second, c.Group+": every node back, over https", func() error {
			sts, err := c.Converged()
			if err == nil && len(sts) < 3 {
				err = fmt.Errorf("%d nodes answer", len(sts))
			}
			return err
		})
	}
	for _, n := range []*Node{l, mf} {
		servesTLSOnly(t, sec, n)
	}
	sendAndConsume(10)
	allTLSOn(t, meta)

	// qmqctl without the TLS flags: refused, saying why.
	_, qmqctl := Binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, qmqctl, "--server", meta.ClientAddrs(), "status")
	cmd.Env = plaintextEnv()
	out, err := cmd.CombinedOutput()
	t.Logf("plaintext qmqctl status: %v\n%s", err, out)
	if err == nil {
		t.Fatalf("plaintext qmqctl status against TLS nodes succeeded:\n%s", out)
	}
	if !strings.Contains(strings.ToLower(string(out)), "tls") {
		t.Fatalf("plaintext qmqctl status against TLS nodes failed without naming TLS:\n%s", out)
	}
}

// plaintextEnv is the environment without the QMQ_TLS_* variables qmqctl
// would read its TLS files from.
func plaintextEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "QMQ_TLS_") })
}

// certNamesAddrs checks that node n's certificate is valid for the IP of
// every address it is dialled at: its client, Raft and HTTP addresses,
// proxied or not.
func certNamesAddrs(t *testing.T, n *Node) {
	t.Helper()
	b, err := os.ReadFile(n.TLS.Cert)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s: no PEM block in %s", n.ID, n.TLS.Cert)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{n.ClientAddr, n.RaftAddr, n.HTTPAddr} {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("%s's certificate is not valid for %s: %v", n.ID, a, err)
		}
	}
}

// allTLSOn waits until `qmqctl status` shows every node, metaserver and
// broker, with TLS on, and logs its table.
func allTLSOn(t *testing.T, meta *Cluster) {
	t.Helper()
	meta.WaitFor(30*time.Second, "qmqctl status: TLS on at every node", func() error {
		var st struct {
			Meta []struct {
				ID    string `json:"id"`
				TLS   bool   `json:"tls"`
				Error string `json:"error"`
			} `json:"meta"`
			Groups []transport.BrokerGroupStatus `json:"groups"`
		}
		if err := meta.CtlJSON(&st, "--server", meta.ClientAddrs(), "status"); err != nil {
			return err
		}
		var nodes int
		for _, m := range st.Meta {
			if !m.TLS {
				return fmt.Errorf("metaserver node %s: TLS off %s", m.ID, m.Error)
			}
			nodes++
		}
		for _, g := range st.Groups {
			for _, n := range g.Nodes {
				if n.SeenMillis < 0 || !n.TLS {
					return fmt.Errorf("%s's node %s: TLS off (seen %d ms ago)", g.Name, n.ID, n.SeenMillis)
				}
				nodes++
			}
		}
		if nodes != 6 {
			return fmt.Errorf("%d nodes listed, want 6", nodes)
		}
		return nil
	})
	out, err := meta.Ctl("--server", meta.ClientAddrs(), "status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("qmqctl status:\n%s", out)
}

// servesTLSOnly checks that node n, restarted, answers over TLS and says
// it serves TLS, and that a plaintext connection to it is refused.
func servesTLSOnly(t *testing.T, sec *Security, n *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := sec.Dialer().Dial(ctx, n.ClientAddr)
	if err != nil {
		t.Fatalf("%s over TLS: %v", n.ID, err)
	}
	body, err := conn.Call(ctx, transport.TypeStatus, nil)
	conn.Close()
	if err != nil {
		t.Fatalf("%s over TLS: %v", n.ID, err)
	}
	var st admin.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s's status: %v", n.ID, err)
	}
	if !st.TLS {
		t.Fatalf("%s restarted does not say it serves TLS: %s", n.ID, body)
	}
	plain, err := transport.Dial(ctx, n.ClientAddr)
	if err == nil {
		_, err = plain.Call(ctx, transport.TypeStatus, nil)
		plain.Close()
	}
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "tls") {
		t.Fatalf("%s restarted: a plaintext status request answered %v, want a refusal naming TLS", n.ID, err)
	}
	t.Logf("%s restarted: TLS on; a plaintext request: %v", n.ID, err)
}
