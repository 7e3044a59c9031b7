package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/testmsg"
)

// TestRaftAdvertise: the address a group records for a node is an IP
// other than the unspecified one, or a DNS name kept as the name; anything
// else is refused with the address in the error.
func TestRaftAdvertise(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.1:6223":  "10.0.0.1:6223",
		"[fd00::1]:6223": "[fd00::1]:6223",
		"qmq-g1-0.qmq-g1.qmq.svc.cluster.local:6223": "qmq-g1-0.qmq-g1.qmq.svc.cluster.local:6223",
		"localhost:1":   "localhost:1",
		"node-1.:65535": "node-1:65535", "Qmq-G1-0.Example.COM:6223": "qmq-g1-0.example.com:6223", "[fe80::1%eth0]:6223": "[fe80::1%eth0]:6223", "host-1.a1:6223": "host-1.a1:6223",
		strings.Repeat("a", 63) + ".b:6223": strings.Repeat("a", 63) + ".b:6223",
	} {
		got, err := raftAdvertise(addr)
		if err != nil || got.String() != want {
			t.Errorf("raftAdvertise(%q) = %v, %v; want %s", addr, got, err, want)
		}
	}
	for _, addr := range []string{
		"0.0.0.0:6223", "[::]:6223", ":6223", // unspecified, or no host
		"10.0.0.1", "host:", "host:0", "host:65536", "host:x", // no port, or not one
		"bad_name:6223", "-a.b:6223", "a-.b:6223", "a..b:6223", ".:6223",
		"010.0.0.1x.5:6223", "2130706433:6223", "a.123:6223", "[10.0.0.1%eth0]:6223", // all-digit last labels; a zone on IPv4
		"010.0.0.1x.5:6223", "2130706433:6223", "a.123:6223", "[10.0.0.1%eth0]:6223", // digits-only last labels; a zone on IPv4
		strings.Repeat("a", 64) + ".b:6223",                     // a label over 63
		strings.Repeat(strings.Repeat("a", 62)+".", 4) + "ab:1", // 254 bytes
	} {
		if got, err := raftAdvertise(addr); err == nil {
			t.Errorf("raftAdvertise(%q) = %v, want an error", addr, got)
		} else if !strings.Contains(err.Error(), "raft address") {
			t.Errorf("raftAdvertise(%q): %v, want it to name the raft address", addr, err)
		}
	}
}

// TestGroupRecordsRaftAddressesByName: a group whose nodes advertise a DNS
// name for Raft records the names, not the IPs they resolve to now, and
// replicates through them (each dial resolves the name again, so a node
// that comes back on another IP under its name is found there).
func TestGroupRecordsRaftAddressesByName(t *testing.T) {
	nodes := startGroup(t, func(_ string, c *Config) {
		_, port, _ := net.SplitHostPort(c.RaftAddr)
		c.RaftAdvertiseAddr = "localhost:" + port
	})
	f := nodes[0].Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range f.Configuration().Servers {
		got = append(got, fmt.Sprintf("%s=%s", s.ID, s.Address))
	}
	for _, n := range nodes {
		_, port, _ := net.SplitHostPort(n.cfg.RaftAddr)
		if want := fmt.Sprintf("%s=localhost:%s", n.cfg.ID, port); !strings.Contains(strings.Join(got, " "), want) {
			t.Errorf("the group's configuration %v does not hold %s", got, want)
		}
	}
	gc := clientOf(t, clientAddrs(nodes)...)
	for i := range 5 {
		sendRaw(t, gc, testmsg.OfSize(fmt.Sprint("m", i), "s", 0, 100))
	}
	sameReplicas(t, nodes)
	if e := nodes[2].fsm.Ends(); e.Messages == 0 {
		t.Fatalf("n3 applied no message: %+v", e)
	}
}

// TestJoinRefusesARaftNameThatDoesNotResolve: a node advertising a Raft
// name nobody can resolve is not added: it would be a voter no member can
// dial.
func TestJoinRefusesARaftNameThatDoesNotResolve(t *testing.T) {
	n1 := startNode(t, "n1", true, nil)
	waitLeader(t, n1)
	n2 := startNode(t, "n2", false, func(c *Config) {
		_, port, _ := net.SplitHostPort(c.RaftAddr)
		c.RaftAdvertiseAddr = "qmq-nowhere.invalid:" + port // .invalid never resolves (RFC 6761)
		c.Insecure = true
	})
	adm, err := admin.New(n1.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = adm.Join(ctx, "g1", "n2", n2.cfg.RaftAdvertiseAddr, n2.ClientAddr())
	if err == nil || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("join of a node whose Raft name does not resolve: %v, want a refusal saying so", err)
	}
	if n := len(n1.Raft().GetConfiguration().Configuration().Servers); n != 1 {
		t.Fatalf("the group has %d servers after the refused join, want 1", n)
	}
}

// TestRaftDialFallsBackToTheLastIP: a peer recorded by name is dialled at
// the IP its name last led to when the name cannot be resolved (the
// resolver is down), and not at all if it never was.
func TestRaftDialFallsBackToTheLastIP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	s := &raftStream{dialer: net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}}
	down := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("the resolver is down")
	}}
	name := raft.ServerAddress("localhost:" + port)
	// Never resolved: nothing to fall back to. ("localhost" is answered
	// from /etc/hosts, so only a name outside it reaches the resolver.)
	s.dialer.Resolver = down
	if _, err := s.Dial("qmq-peer.example:"+raft.ServerAddress(port), time.Second); err == nil {
		t.Fatal("a name never resolved was dialled with the resolver down")
	}
	s.dialer.Resolver = nil
	c, err := s.Dial(name, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if ip, ok := s.lastIP.Load("localhost"); !ok || ip != "127.0.0.1" {
		t.Fatalf("the last IP of localhost: %v, %v; want 127.0.0.1", ip, ok)
	}
	// The name now fails to resolve: the last IP is dialled.
	s.lastIP.Store("qmq-peer.example", "127.0.0.1")
	s.dialer.Resolver = down
	c, err = s.Dial("qmq-peer.example:"+raft.ServerAddress(port), time.Second)
	if err != nil {
		t.Fatalf("a name that does not resolve, with a last IP: %v", err)
	}
	c.Close()
}
