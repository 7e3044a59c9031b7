package server

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// raftDialer is a Raft stream layer that dials with a test's TLS config,
// for a transport that only sends.
type raftDialer struct {
	net.Listener
	config *tls.Config
}

func (s raftDialer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return (&tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.config}).Dial("tcp", string(addr))
}

// voteWithHigherTerm sends n a RequestVote ten terms ahead of it, as a
// leadership transfer's candidate (so that a leader does not ignore it),
// over a connection made with config, or over raft's own plaintext TCP
// transport if config is nil, and returns the RPC's error.
func voteWithHigherTerm(t *testing.T, n *Node, config *tls.Config) error {
	t.Helper()
	var trans *raft.NetworkTransport
	if config == nil {
		plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		trans = plain
	} else {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: raftDialer{Listener: lis, config: config}, MaxPool: 1, Timeout: 5 * time.Second,
			Logger: hclog.NewNullLogger(),
		})
	}
	defer trans.Close()
	term := n.raft.CurrentTerm()
	req := &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax,
			Addr: trans.EncodePeer("intruder", trans.LocalAddr())},
		Term:               term + 10,
		LastLogIndex:       n.raft.LastIndex() + 10,
		LastLogTerm:        term + 9,
		LeadershipTransfer: true,
	}
	var resp raft.RequestVoteResponse
	return trans.RequestVote(raft.ServerID(n.cfg.ID), raft.ServerAddress(n.cfg.RaftAddr), req, &resp)
}

// clientConfig is a TLS client config of the files of c.
func clientConfig(t *testing.T, c TLSConfig) *tls.Config {
	t.Helper()
	r, err := tlsconf.Load(c.files(), tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Client()
}

// TestTLSRaftRefusesAllButNodesOfItsCA: a TLS node's Raft port refuses a
// RequestVote ten terms ahead in plaintext, from a client certificate of
// its CA and from a node certificate of another CA, and its term stays;
// from a node certificate of its CA, the same request moves its term,
// while a connection that never handshakes is open.
func TestTLSRaftRefusesAllButNodesOfItsCA(t *testing.T) {
	fx, other := newTLSFixture(t), newTLSFixture(t)
	n := startNode(t, "n1", true, func(c *Config) { c.TLS = fx.node("n1") })
	waitLeader(t, n)
	fx.issue("app", tlsconf.Spec{CN: "app"})
	foreign := other.node("n9")
	foreign.CAFile = fx.config("n1").CAFile // it trusts n1: n1 must refuse it
	for _, tc := range []struct {
		name   string
		config *tls.Config
	}{
		{"plaintext", nil},
		{"a client certificate of its CA", clientConfig(t, fx.config("app"))},
		{"a node certificate of another CA", clientConfig(t, foreign)},
	} {
		term := n.raft.CurrentTerm()
		if err := voteWithHigherTerm(t, n, tc.config); err == nil {
			t.Errorf("%s: the vote request was answered", tc.name)
		}
		if got := n.raft.CurrentTerm(); got != term {
			t.Errorf("%s: term %d, was %d", tc.name, got, term)
		}
	}
	// A connection that never handshakes must not hold up the next
	// (Accept does not handshake): the vote's RPC timeout, 5 s, is below
	// the handshake's, 10 s.
	silent, err := net.Dial("tcp", n.cfg.RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	term := n.raft.CurrentTerm()
	if err := voteWithHigherTerm(t, n, clientConfig(t, fx.node("n2"))); err != nil {
		t.Fatalf("a node certificate of its CA: %v", err)
	}
	if got := n.raft.CurrentTerm(); got < term+10 {
		t.Fatalf("a node certificate of its CA: term %d, want at least %d", got, term+10)
	}
}

// TestTLSRaftNodeOfAnotherCA: a node whose certificate is another CA's
// cannot join a TLS group (the leader's check of it fails with ErrTLS);
// forced in as a nonvoter, it gets no entry while the leader commits.
func TestTLSRaftNodeOfAnotherCA(t *testing.T) {
	fx, other := newTLSFixture(t), newTLSFixture(t)
	n1 := startNode(t, "n1", true, func(c *Config) { c.TLS = fx.node("n1") })
	waitLeader(t, n1)
	var logs lockedBuffer
	n2 := startNode(t, "n2", false, func(c *Config) {
		c.TLS = other.node("n2")
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(&logs, tWriter{t})})
	})
	admin := newAdmin(t, n1.ClientAddr(), connOf(n1.cfg.TLS))
	err := admin.Join(ctxFor(t, 10*time.Second), "g1", "n2", n2.cfg.RaftAddr, n2.ClientAddr())
	if err == nil || !strings.Contains(err.Error(), transport.ErrTLS.Error()) {
		t.Fatalf("join of a node of another CA: %v, want a refusal naming %q", err, transport.ErrTLS)
	}

	if err := n1.raft.AddNonvoter("n2", raft.ServerAddress(n2.cfg.RaftAddr), 0, 5*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	commit := n1.raft.CommitIndex()
	if err := n1.raft.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the leader's raft connection to be refused", func() bool {
		return strings.Contains(logs.String(), "refused a raft connection")
	})
	if got := n1.raft.CommitIndex(); got <= commit {
		t.Fatalf("the leader's commit index %d did not pass %d", got, commit)
	}
	if got := n2.raft.LastIndex(); got != 0 {
		t.Fatalf("the node of another CA holds entries up to %d", got)
	}
}
