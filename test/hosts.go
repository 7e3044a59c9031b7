package test

import (
	"os/exec"

	"github.com/qmqgo/qmq/test/netns"
)

// Ports every node on a host of its own listens on (UseHosts): each host
// has its own network namespace, so every node can take the same.
const hostClientPort, hostRaftPort, hostHTTPPort = 7000, 7001, 7002

// UseHosts runs every node started from now on on a host of its own of
// net (a network namespace, test/netns): it listens on and dials from the
// host's address, and everything it sends crosses net's switch, with its
// links' delay, loss and cuts. The harness (Status, Ctl, the SDK clients
// of the test) reaches it from net.Self. It excludes UseProxies: the
// switch cuts and slows links instead.
func (c *Cluster) UseHosts(net *netns.Network) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proxied {
		c.t.Fatalf("%s: UseHosts with UseProxies", c.Group)
	}
	c.hosts = net
}

// Hosts returns the hosts of the cluster's nodes, in start order.
func (c *Cluster) Hosts() []*netns.Host {
	var out []*netns.Host
	for _, n := range c.Nodes() {
		if n.Host != nil {
			out = append(out, n.Host)
		}
	}
	return out
}

// onHost gives the node a new host of the cluster's network and its
// addresses there.
func (n *Node) onHost() {
	h := n.c.hosts.Host()
	n.Host, n.IP = h, h.Addr.String()
	n.ClientAddr, n.RaftAddr, n.HTTPAddr = h.AddrPort(hostClientPort), h.AddrPort(hostRaftPort), h.AddrPort(hostHTTPPort)
	n.ClientBind, n.RaftBind = n.ClientAddr, n.RaftAddr
}

// hostArgs are the node's flags of its host: --insecure in plaintext,
// which qmqd refuses on an address off loopback without it.
func (n *Node) hostArgs() []string {
	if n.Host == nil || n.c.sec != nil {
		return nil
	}
	return []string{"--insecure"}
}

// command returns the command that runs bin (qmqd) with args for the node: on
// its host (ip netns exec, which keeps the pid: Kill and Pause reach
// qmqd), or here.
func (n *Node) command(bin string, args []string) *exec.Cmd {
	if n.Host != nil {
		return n.Host.Command(bin, args...)
	}
	return exec.Command(bin, args...)
}
