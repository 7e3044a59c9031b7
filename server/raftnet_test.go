package server

import (
	"fmt"
	"net"
	"strings"
	"testing"

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
		"localhost:1":                       "localhost:1",
		"node-1.:65535":                     "node-1.:65535",
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
