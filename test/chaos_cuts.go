package test

import (
	"fmt"
	"time"
)

// Faults of the chaos catalogue that cut links rather than nodes: a
// leader cut from its clients for longer than the consumer session
// timeout, a broker group cut from the metaserver, and one-way cuts.

func everyone(string) bool { return true }

// cutClients cuts a broker group's leader from every client for longer
// than the consumer session timeout, while its Raft links stay up: it
// stays the leader, its consumers' sessions expire, and their unacked
// messages go back to their groups. When the cut heals the consumers come
// back under new epochs: their late acks are refused as stale, and the
// messages are delivered again (duplicates within a group, which
// at-least-once allows; nothing may be lost).
func (ch *Chaos) cutClients(c *Cluster) string {
	l, term := ch.leader(c)
	d := ch.SessionTimeout + time.Duration(1000+ch.rng.IntN(3000))*time.Millisecond
	l.ClientProxy.Refuse(everyone)
	sleepFor(d)
	l.ClientProxy.Refuse(nil)
	return fmt.Sprintf("cut %s (leader in term %d) from every client for %s, past the %s session timeout", l.ID, term, d, ch.SessionTimeout)
}

// cutMeta cuts every node of a broker group from the metaserver for
// 3–8 s: the group's heartbeats stop, and past the metaserver's group
// timeout it calls the group unavailable and routes producers around it.
// Its clients still reach it; nothing may be lost when it comes back.
func (ch *Chaos) cutMeta(c *Cluster) string {
	d := time.Duration(3000+ch.rng.IntN(5000)) * time.Millisecond
	ch.cutFromMeta(c, true)
	sleepFor(d)
	ch.cutFromMeta(c, false)
	return fmt.Sprintf("cut every node of %s from the metaserver for %s", c.Group, d)
}

// cutFromMeta makes the metaserver's client proxies refuse (and cut) every
// connection from broker group c's nodes, which dial from their own IPs
// (qmqd --source-ip; with cut false, lets them through again); clients
// still reach both.
func (ch *Chaos) cutFromMeta(c *Cluster, cut bool) {
	var refuse func(string) bool
	if cut {
		ips := map[string]bool{}
		for _, n := range c.Nodes() {
			ips[n.IP] = true
		}
		refuse = func(src string) bool { return ips[src] }
	}
	for _, m := range ch.meta.Nodes() {
		m.ClientProxy.Refuse(refuse)
	}
}

// oneWay cuts one direction of a node's links for 3–6 s (the leader's half
// the time), keeping the connections open: what the node sends its peers
// vanishes (a leader's appends, a candidate's votes), or its answers to
// its peers, or its answers to clients (requests are handled, replies
// lost: producers retry with the same ids, pulls ask again from where they
// were).
func (ch *Chaos) oneWay(c *Cluster) string {
	victim, _, _, role := ch.victim(c)
	nodes := c.Nodes()
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	var what string
	var undo func()
	switch ch.rng.IntN(3) {
	case 0:
		from := func(src string) bool { return src == victim.IP }
		for _, n := range nodes {
			if n != victim {
				n.RaftProxy.Drop(from, true)
			}
		}
		what = "what it sends its peers vanishes"
		undo = func() {
			for _, n := range nodes {
				n.RaftProxy.Drop(nil, true)
			}
		}
	case 1:
		victim.RaftProxy.Drop(everyone, false)
		what = "its answers to its peers vanish"
		undo = func() { victim.RaftProxy.Drop(nil, false) }
	default:
		victim.ClientProxy.Drop(everyone, false)
		what = "its answers to clients vanish"
		undo = func() { victim.ClientProxy.Drop(nil, false) }
	}
	sleepFor(d)
	undo()
	return fmt.Sprintf("one-way cut of %s (%s) for %s: %s", victim.ID, role, d, what)
}
