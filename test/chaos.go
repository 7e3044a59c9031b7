package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// Chaos applies faults from a catalogue (chaos_faults.go) to the groups of
// a cluster on a seeded random schedule, one at a time, healing the
// cluster after each: SIGKILL and restart of a leader, a follower, a random
// node or a whole group; SIGSTOP of a leader for a few seconds; a node (the
// leader half the time) cut from the rest of its group and from clients in
// both directions; a node whose every connection is slowed; a node killed
// and restarted with the tail of a log torn past its checkpoint; a
// leader's clock jumping forward or back; a follower whose clock is
// ahead made the leader; a leader cut from its clients past the consumer
// session timeout; a broker group cut from the metaserver; one-way cuts;
// and full disks (on the group that has small disks). Partitions,
// latency, cuts and clock faults need the clusters' proxies
// (Cluster.UseProxies). The same seed gives the same choices (the timing
// of the processes differs from run to run). Every kind of fault is
// applied at least once before any kind drawn by weight repeats, so a run
// long enough for each has each.
type Chaos struct {
	t      testing.TB
	rng    *rand.Rand
	meta   *Cluster
	groups []*Cluster
	start  time.Time

	// SessionTimeout is the broker groups' consumer session timeout
	// (qmqd --session-timeout), which cutClients outlasts.
	SessionTimeout time.Duration
	// DiskGroup is the broker group on small disks (Cluster.UseSmallDisks),
	// with its send floor and apply reserve (qmqd --min-free-disk,
	// --disk-reserve); nil: no disk faults.
	DiskGroup              *Cluster
	DiskFloor, DiskReserve int64
	// Only, if set, names the kinds of otherFaults to apply (the others
	// are left out), to aim a run at them.
	Only []string

	mu       sync.Mutex
	Schedule []string       // every fault applied, with its time since the start
	Counts   map[string]int // faults applied, by kind
	// Unavailable holds, by fault kind, how long sends to a group were
	// refused after each leader loss.
	Unavailable map[string][]time.Duration
	current     string // the kind of the fault being applied
}

// NewChaos returns a fault runner over the broker groups and the
// metaserver group.
func NewChaos(t testing.TB, seed uint64, meta *Cluster, groups ...*Cluster) *Chaos {
	return &Chaos{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), meta: meta, groups: groups,
		start: time.Now(), Counts: map[string]int{}, Unavailable: map[string][]time.Duration{}}
}

// fault is one kind of fault: it is applied to a group and returns once
// the group has a leader again (the nodes it stopped may still be down).
type fault struct {
	name   string
	weight int
	apply  func(ch *Chaos, c *Cluster) string // what it did, for the schedule
	broker bool                               // broker groups only
	// pick, if set, chooses the group itself (nil: the fault cannot be
	// applied in this run).
	pick func(ch *Chaos) *Cluster
}

// killLeaderFault is every other fault and partitionFault every fourth;
// the others are drawn from otherFaults by weight.
var (
	killLeaderFault = fault{"kill-leader", 0, (*Chaos).killLeader, false, nil}
	partitionFault  = fault{"partition", 0, (*Chaos).partition, false, nil}
	otherFaults     = []fault{
		{"kill-follower", 20, (*Chaos).killFollower, false, nil},
		{"kill-random", 10, (*Chaos).killRandom, false, nil},
		{"kill-group", 5, (*Chaos).killGroup, true, nil},
		{"pause-leader", 20, (*Chaos).pauseLeader, false, nil},
		{"slow-node", 10, (*Chaos).slowNode, false, nil},
		{"torn-write", 15, (*Chaos).tornWrite, true, nil},
		{"clock-jump", 15, (*Chaos).clockJump, true, nil},
		{"wrong-clock-leader", 15, (*Chaos).wrongClockLeader, true, nil},
		{"cut-clients", 10, (*Chaos).cutClients, true, nil},
		{"cut-meta", 10, (*Chaos).cutMeta, true, func(ch *Chaos) *Cluster {
			if ch.meta == nil {
				return nil
			}
			return ch.groups[ch.rng.IntN(len(ch.groups))]
		}},
		{"one-way", 15, (*Chaos).oneWay, false, nil},
		{"disk-full", 15, (*Chaos).diskFull, true, func(ch *Chaos) *Cluster { return ch.DiskGroup }},
	}
)

// Run applies faults until d has passed, every other one a leader kill and
// every fourth a partition, the rest from otherFaults: first each kind
// once, in a random order, then drawn by weight. Each goes to a random
// group (the metaserver's one time in five) unless it picks its own; then
// Run restarts what the fault stopped, waits for every node to catch up,
// and pauses for 0.5–2 s.
func (ch *Chaos) Run(d time.Duration) {
	var kinds []fault // every kind this run can apply
	total := 0
	for _, f := range otherFaults {
		if ch.Only != nil && !slices.Contains(ch.Only, f.name) {
			continue
		}
		if f.pick == nil || f.pick(ch) != nil {
			kinds = append(kinds, f)
			total += f.weight
		}
	}
	firsts := append([]fault(nil), kinds...)
	ch.rng.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
	for i, deadline := 0, time.Now().Add(d); time.Now().Before(deadline); i++ {
		f := killLeaderFault
		switch {
		case i%4 == 1:
			f = partitionFault
		case i%4 == 3 && len(firsts) > 0:
			f, firsts = firsts[0], firsts[1:]
		case i%4 == 3:
			pick := ch.rng.IntN(total)
			for _, f = range kinds {
				if pick < f.weight {
					break
				}
				pick -= f.weight
			}
		}
		c := ch.groups[ch.rng.IntN(len(ch.groups))]
		if ch.meta != nil && !f.broker && ch.rng.IntN(5) == 0 {
			c = ch.meta
		}
		if f.pick != nil {
			c = f.pick(ch)
		}
		ch.current = f.name
		what := f.apply(ch, c)
		ch.record(f.name, c.Group+": "+what)
		ch.heal(c)
		sleepFor(time.Duration(500+ch.rng.IntN(1500)) * time.Millisecond)
	}
}

// sleepFor waits d, if it is positive (the length of a fault, or what is
// left of it).
func sleepFor(d time.Duration) {
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	<-timer.C
}

func (ch *Chaos) record(kind, what string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.Counts[kind]++
	line := fmt.Sprintf("%7.1fs %-13s %s", time.Since(ch.start).Seconds(), kind, what)
	ch.Schedule = append(ch.Schedule, line)
	ch.t.Logf("chaos: %s", line)
}

// leader returns the group's leader and its term.
func (ch *Chaos) leader(c *Cluster) (*Node, uint64) {
	ch.t.Helper()
	var n *Node
	var term uint64
	c.WaitFor(30*time.Second, c.Group+" has a leader", func() error {
		l, st, err := c.Leader()
		if err == nil {
			n, term = l, st.Term
		}
		return err
	})
	return n, term
}

// awaitNewLeader waits for a leader in a term after term, and for a broker
// group returns how long sends to the group were refused from since on:
// probe sends go to the group's nodes every 20 ms until one is stored.
func (ch *Chaos) awaitNewLeader(c *Cluster, term uint64, since time.Time) {
	ch.t.Helper()
	c.WaitFor(30*time.Second, c.Group+": a leader after term "+fmt.Sprint(term), func() error {
		_, st, err := c.Leader()
		if err != nil {
			return err
		}
		if st.Term <= term {
			return fmt.Errorf("term %d", st.Term)
		}
		return nil
	})
	if c.meta {
		return
	}
	var addrs []string
	for _, n := range c.Nodes() {
		addrs = append(addrs, n.ClientAddr)
	}
	gc, err := c.Security().Dialer().NewGroupClient(addrs)
	if err != nil {
		ch.t.Fatalf("probe %s: %v", c.Group, err)
	}
	defer gc.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req := &transport.SendRequest{Messages: []*logs.Message{{ID: fmt.Sprintf("probe-%d-%d", since.UnixNano(), i), Subject: "chaos-probe", CreatedAt: time.Now().UnixMilli()}}}
		_, err := gc.Call(ctx, transport.TypeSend, req.Encode())
		cancel()
		if err == nil {
			break
		}
		if time.Since(since) > time.Minute {
			ch.t.Fatalf("%s refused sends for a minute after a fault: %v", c.Group, err)
		}
		sleepFor(20 * time.Millisecond)
	}
	ch.mu.Lock()
	ch.Unavailable[ch.current] = append(ch.Unavailable[ch.current], time.Since(since))
	ch.mu.Unlock()
}

// heal restarts the group's stopped nodes and waits until every node names
// the same leader and has applied what that leader had applied when the
// wait began. (Applied, not committed: the entries Raft adds on its own,
// such as a new leader's no-op, are committed but never reach the state
// machine, so a quiet group's applied index may stay below its commit
// index.)
func (ch *Chaos) heal(c *Cluster) {
	ch.t.Helper()
	for _, n := range c.Nodes() {
		if !n.Running() {
			n.Restart()
		}
	}
	var target uint64
	c.WaitFor(60*time.Second, c.Group+" healed", func() error {
		sts, err := c.Statuses()
		if err != nil {
			return err
		}
		if len(sts) != len(c.Nodes()) {
			return fmt.Errorf("%d of %d nodes answer", len(sts), len(c.Nodes()))
		}
		var leader string
		for _, st := range sts {
			if st.State == "Leader" {
				leader = st.ID
				if target == 0 {
					target = st.AppliedIndex
				}
			}
		}
		if leader == "" {
			return fmt.Errorf("no leader: %s", Describe(sts))
		}
		for _, st := range sts {
			if st.Leader != leader || st.AppliedIndex < target {
				return fmt.Errorf("not caught up to %d under %s: %s", target, leader, Describe(sts))
			}
		}
		return nil
	})
}

// Summary describes the run: faults by kind, and by kind of fault how long
// sends were refused after a leader loss.
func (ch *Chaos) Summary() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var kinds, refused []string
	for k, n := range ch.Counts {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	for k, d := range ch.Unavailable {
		un := append([]time.Duration(nil), d...)
		sort.Slice(un, func(i, j int) bool { return un[i] < un[j] })
		refused = append(refused, fmt.Sprintf("after %s median %s, longest %s (%d)",
			k, un[len(un)/2].Round(time.Millisecond), un[len(un)-1].Round(time.Millisecond), len(un)))
	}
	sort.Strings(kinds)
	sort.Strings(refused)
	s := fmt.Sprintf("%d faults (%s)", len(ch.Schedule), strings.Join(kinds, ", "))
	if len(refused) > 0 {
		s += "; sends refused " + strings.Join(refused, "; ")
	}
	return s
}
