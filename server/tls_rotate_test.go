package server

import (
	"context"
	"crypto/tls"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/tlsconf"
)

// serialOf is the serial number of the certificate in certPEM.
func serialOf(t *testing.T, certPEM []byte) *big.Int {
	t.Helper()
	c, err := parseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber
}

// servesSerial reports whether a new TLS connection to addr, made with
// config, finds a server certificate with serial.
func servesSerial(config *tls.Config, addr string, serial *big.Int) bool {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, config)
	if err != nil {
		return false
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Cmp(serial) == 0
}

// TestTLSRotationWhileSending: the leader's certificate, replaced by
// rename with a new one of the same CA while a producer sends, is what new
// handshakes on its client and Raft ports see; no send fails, and once
// every Raft connection is made anew (with the new certificate, as
// client and server), the followers go on replicating.
func TestTLSRotationWhileSending(t *testing.T) {
	fx := newTLSFixture(t)
	nodes := startGroup(t, withTLS(fx))
	addrs := clientAddrs(nodes)
	p, err := qmq.NewProducer(strings.Join(addrs, ","), fx.client("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var sent, failed atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := p.SendMessage(ctx, p.GenerateMessage("orders")); err != nil {
				if ctx.Err() == nil {
					failed.Add(1)
					t.Errorf("send failed: %v", err)
				}
				continue
			}
			sent.Add(1)
		}
	}()
	defer wg.Wait()
	defer cancel()
	waitFor(t, 10*time.Second, "sends before the rotation", func() bool { return sent.Load() >= 20 })

	var leader *Node
	waitFor(t, 10*time.Second, "a leader", func() bool { leader = leaderOf(nodes); return leader != nil })
	id := leader.cfg.ID
	serial := serialOf(t, fx.issue(id, tlsconf.Spec{CN: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: true}))
	config := clientConfig(t, fx.config(id))
	for _, addr := range []string{leader.ClientAddr(), leader.cfg.RaftAddr} {
		waitFor(t, 10*time.Second, "a new handshake at "+addr+" to see the new certificate", func() bool {
			return servesSerial(config, addr, serial)
		})
	}

	for _, n := range nodes {
		n.trans.CloseStreams()
	}
	after := sent.Load() + 20
	waitFor(t, 20*time.Second, "sends after the rotation", func() bool { return sent.Load() >= after })
	commit := leader.raft.CommitIndex()
	waitFor(t, 20*time.Second, "every node to apply what was sent after", func() bool {
		for _, n := range nodes {
			if n.raft.AppliedIndex() < commit {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d sends failed", failed.Load())
	}
}
