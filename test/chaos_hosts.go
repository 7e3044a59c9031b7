package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/netns"
	"github.com/qmqgo/qmq/transport"
)

// The chaos run across hosts (TestChaosAcrossHosts): every node on a host
// of its own (Cluster.UseHosts), links of their own latency, jitter and
// loss between every two hosts, and faults that cut links at the switch
// rather than at proxies.

// hostFault is one kind of fault across hosts: applied to a group, it
// returns what it did once the group has a leader again; Run heals the
// links and restarts what it stopped.
type hostFault struct {
	name  string
	apply func(ch *Chaos, net *netns.Network, c *Cluster) string
}

// hostFaults are the kinds RunHosts applies, each once per round.
var hostFaults = []hostFault{
	{"kill-leader", func(ch *Chaos, _ *netns.Network, c *Cluster) string { return ch.killLeader(c) }},
	{"kill-follower", func(ch *Chaos, _ *netns.Network, c *Cluster) string { return ch.killFollower(c) }},
	{"cut-host", (*Chaos).cutHost},
	{"cut-leader-host", (*Chaos).cutLeaderHost},
	{"split-group", (*Chaos).splitGroup},
}

// SetHostLinks gives the link between every two hosts of net (the test's
// own too) a round trip drawn from [rttMin, rttMax], a jitter and loss of
// linkOfRTT: each link its own, the
// same for a seed.
func SetHostLinks(net *netns.Network, seed uint64, rttMin, rttMax time.Duration, loss float64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	hosts := append(net.Hosts(), net.Self())
	for i, a := range hosts {
		for _, b := range hosts[i+1:] {
			rtt := rttMin + time.Duration(rng.Int64N(int64(rttMax-rttMin)+1))
			net.SetLink(a, b, linkOfRTT(rtt, loss))
		}
	}
}

// RunHosts applies the faults of hostFaults until d has passed, in rounds
// of every kind once in a random order, each to a random group (the
// metaserver's one time in five); after each it restores every link,
// restarts what the fault stopped, waits for every node to catch up, and
// pauses for 0.5–2 s.
func (ch *Chaos) RunHosts(d time.Duration, net *netns.Network) {
	var round []hostFault
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		if len(round) == 0 {
			round = append(round, hostFaults...)
			ch.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		f := round[0]
		round = round[1:]
		c := ch.groups[ch.rng.IntN(len(ch.groups))]
		if ch.meta != nil && ch.rng.IntN(5) == 0 {
			c = ch.meta
		}
		ch.applying.Lock()
		ch.begin(f.name)
		what := f.apply(ch, net, c)
		ch.record(f.name, c.Group+": "+what)
		for _, h := range c.Hosts() {
			net.Cut(h, false)
		}
		ch.heal(c)
		ch.end()
		ch.applying.Unlock()
		sleepFor(time.Duration(500+ch.rng.IntN(1500)) * time.Millisecond)
	}
}

// cutHost cuts a random node's host off from every other host, the
// test's own included (so from its clients too), for 3–6 s.
func (ch *Chaos) cutHost(net *netns.Network, c *Cluster) string {
	nodes := c.Nodes()
	return ch.cutOff(net, c, nodes[ch.rng.IntN(len(nodes))])
}

// cutLeaderHost cuts the leader's host off for 3–6 s: the others elect a
// new leader, and sends resume on it (Unavailable says after how long).
func (ch *Chaos) cutLeaderHost(net *netns.Network, c *Cluster) string {
	l, _ := ch.leader(c)
	return ch.cutOff(net, c, l)
}

func (ch *Chaos) cutOff(net *netns.Network, c *Cluster, victim *Node) string {
	l, term := ch.leader(c)
	role := "follower"
	if victim == l {
		role = fmt.Sprintf("leader in term %d", term)
	}
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	at := time.Now()
	net.Cut(victim.Host, true)
	if victim == l {
		ch.awaitFailover(c, l, term, at)
	}
	sleepFor(d - time.Since(at))
	net.Cut(victim.Host, false)
	return fmt.Sprintf("host of %s (%s) cut off for %s", victim.ID, role, d)
}

// splitGroup splits the group 1|2 for 3–6 s: one node (the leader half
// the time) loses its links to the other two, and keeps those to clients
// and to the other groups. A leader on the side of one loses its majority
// and must step down; the two elect another.
func (ch *Chaos) splitGroup(net *netns.Network, c *Cluster) string {
	victim, l, term, role := ch.victim(c)
	var others []*netns.Host
	for _, n := range c.Nodes() {
		if n != victim {
			others = append(others, n.Host)
		}
	}
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	at := time.Now()
	net.Split([]*netns.Host{victim.Host}, others, true)
	if victim == l {
		ch.awaitFailover(c, l, term, at)
	}
	sleepFor(d - time.Since(at))
	net.Split([]*netns.Host{victim.Host}, others, false)
	return fmt.Sprintf("%s (%s) split from the other two for %s", victim.ID, role, d)
}

// linkOfRTT is a link of round trip rtt, jitter a tenth of its one-way
// delay with reordering, and loss.
func linkOfRTT(rtt time.Duration, loss float64) netns.Link {
	return netns.Link{Delay: rtt / 2, Jitter: rtt / 20, Reorder: true, Loss: loss}
}

// awaitFailover waits, after leader l of term lost its host or its group
// at at, until another node leads in a later term, and for a broker group
// until a probe send is acknowledged: probes every 20 ms, each bounded by
// 500 ms, to the other nodes' addresses (a client that still tries l's
// adds its own dial timeouts, which are not the group's failover). It
// polls only the others' /status, since a cut host's would hold each poll
// for the HTTP client's timeout (as Chaos.awaitNewLeader's does). It
// returns both times since at (acked 0 for the metaserver) and records
// acked in Unavailable.
func (ch *Chaos) awaitFailover(c *Cluster, l *Node, term uint64, at time.Time) (elected, acked time.Duration) {
	ch.t.Helper()
	var others []string
	c.WaitFor(30*time.Second, c.Group+": another leader after term "+fmt.Sprint(term), func() error {
		others = others[:0]
		for _, n := range c.Nodes() {
			if n == l {
				continue
			}
			others = append(others, n.ClientAddr)
			if st, err := n.Status(); err == nil && st.State == "Leader" && st.Term > term {
				return nil
			}
		}
		return fmt.Errorf("no node but %s leads in a term after %d", l.ID, term)
	})
	elected = time.Since(at)
	if c.meta {
		return elected, 0
	}
	gc, err := c.Security().Dialer().NewLeaderClient(others)
	if err != nil {
		ch.t.Fatalf("probe %s: %v", c.Group, err)
	}
	defer gc.Close()
	err = Poll(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		req := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprintf("failover-%d", time.Now().UnixNano()), Subject: "chaos-probe", CreatedAt: time.Now().UnixMilli()}}}
		_, err := gc.Call(ctx, transport.TypeSend, req.Encode())
		return err
	})
	if err != nil {
		ch.t.Fatalf("%s: no send acknowledged 30 s after %s lost its host or its group: %v", c.Group, l.ID, err)
	}
	acked = time.Since(at)
	ch.mu.Lock()
	ch.Unavailable[ch.current] = append(ch.Unavailable[ch.current], acked)
	ch.mu.Unlock()
	return elected, acked
}
