package test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// Chaos applies faults from a catalogue to the groups of a cluster on a
// seeded random schedule, one at a time, healing the cluster after each:
// SIGKILL and restart of a leader, a follower, a random node or a whole
// group, SIGSTOP of a leader for a few seconds, a node (the leader half the
// time) cut from the rest of its group and from clients in both directions,
// a node whose every connection is slowed, and a node killed and restarted
// with the tail of a log torn past its checkpoint, and a leader's clock
// jumping forward or back. Partitions and latency need
// the clusters' proxies (Cluster.UseProxies). The same seed gives the
// same choices (the timing of the processes differs from run to run).
type Chaos struct {
	t      testLog
	rng    *rand.Rand
	meta   *Cluster
	groups []*Cluster
	start  time.Time

	mu       sync.Mutex
	Schedule []string       // every fault applied, with its time since the start
	Counts   map[string]int // faults applied, by kind
	// Unavailable holds, by fault kind, how long sends to a group were
	// refused after each leader loss.
	Unavailable map[string][]time.Duration
	current     string // the kind of the fault being applied
}

// testLog is what Chaos needs of a testing.TB.
type testLog interface {
	Helper()
	Logf(string, ...any)
	Fatalf(string, ...any)
}

// NewChaos returns a fault runner over the broker groups and the
// metaserver group.
func NewChaos(t testLog, seed uint64, meta *Cluster, groups ...*Cluster) *Chaos {
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
}

// killLeaderFault is every other fault and partitionFault every fourth;
// the others are drawn from otherFaults by weight.
var (
	killLeaderFault = fault{"kill-leader", 0, (*Chaos).killLeader, false}
	partitionFault  = fault{"partition", 0, (*Chaos).partition, false}
	otherFaults     = []fault{
		{"kill-follower", 20, (*Chaos).killFollower, false},
		{"kill-random", 10, (*Chaos).killRandom, false},
		{"kill-group", 5, (*Chaos).killGroup, true},
		{"pause-leader", 20, (*Chaos).pauseLeader, false},
		{"slow-node", 10, (*Chaos).slowNode, false},
		{"torn-write", 15, (*Chaos).tornWrite, true},
		{"clock-jump", 15, (*Chaos).clockJump, true},
	}
)

// Run applies faults until d has passed, every other one a leader kill and
// every fourth a partition: each to a random group (the metaserver's one
// time in five), then restarts what it stopped, waits for every node to
// catch up, and pauses for 0.5–2 s.
func (ch *Chaos) Run(d time.Duration) {
	total := 0
	for _, f := range otherFaults {
		total += f.weight
	}
	for i, deadline := 0, time.Now().Add(d); time.Now().Before(deadline); i++ {
		f := killLeaderFault
		switch {
		case i%4 == 1:
			f = partitionFault
		case i%4 == 3:
			pick := ch.rng.IntN(total)
			for _, f = range otherFaults {
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
		ch.current = f.name
		what := f.apply(ch, c)
		ch.record(f.name, c.Group+": "+what)
		ch.heal(c)
		pause := time.NewTimer(time.Duration(500+ch.rng.IntN(1500)) * time.Millisecond)
		<-pause.C
	}
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
	gc, err := transport.NewGroupClient(addrs)
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
		timer := time.NewTimer(20 * time.Millisecond)
		<-timer.C
	}
	ch.mu.Lock()
	ch.Unavailable[ch.current] = append(ch.Unavailable[ch.current], time.Since(since))
	ch.mu.Unlock()
}

func (ch *Chaos) killLeader(c *Cluster) string {
	l, term := ch.leader(c)
	at := time.Now()
	l.Kill()
	ch.awaitNewLeader(c, term, at)
	return fmt.Sprintf("SIGKILL %s (leader in term %d)", l.ID, term)
}

func (ch *Chaos) killFollower(c *Cluster) string {
	l, _ := ch.leader(c)
	var followers []*Node
	for _, n := range c.Nodes() {
		if n != l {
			followers = append(followers, n)
		}
	}
	f := followers[ch.rng.IntN(len(followers))]
	f.Kill()
	return fmt.Sprintf("SIGKILL %s (follower)", f.ID)
}

func (ch *Chaos) killRandom(c *Cluster) string {
	return fmt.Sprintf("SIGKILL %s", ch.killAny(c).ID)
}

// killAny SIGKILLs a random node of the group and, if it led, waits for
// the next leader; it returns the node.
func (ch *Chaos) killAny(c *Cluster) *Node {
	nodes := c.Nodes()
	n := nodes[ch.rng.IntN(len(nodes))]
	l, term := ch.leader(c)
	at := time.Now()
	n.Kill()
	if n == l {
		ch.awaitNewLeader(c, term, at)
	}
	return n
}

// killGroup kills every node of the group, then restarts them all.
func (ch *Chaos) killGroup(c *Cluster) string {
	_, term := ch.leader(c)
	at := time.Now()
	var ids []string
	for _, n := range c.Nodes() {
		n.Kill()
		ids = append(ids, n.ID)
	}
	for _, n := range c.Nodes() {
		n.Restart()
	}
	ch.awaitNewLeader(c, term, at)
	return "SIGKILL " + strings.Join(ids, ", ") + ", then restart all"
}

// pauseLeader SIGSTOPs the leader for 2–5 s: the others elect a new one,
// and the old one finds itself deposed when it resumes.
func (ch *Chaos) pauseLeader(c *Cluster) string {
	l, term := ch.leader(c)
	d := time.Duration(2000+ch.rng.IntN(3000)) * time.Millisecond
	at := time.Now()
	l.Pause()
	ch.awaitNewLeader(c, term, at)
	if rest := d - time.Since(at); rest > 0 {
		timer := time.NewTimer(rest)
		<-timer.C
	}
	l.Resume()
	return fmt.Sprintf("SIGSTOP %s (leader in term %d) for %s", l.ID, term, d)
}

// partition cuts one node of the group (the leader half the time) from the
// others and from clients, in both directions, for 3–6 s: its proxies
// refuse every connection, and the others' Raft proxies refuse its.
func (ch *Chaos) partition(c *Cluster) string {
	l, term := ch.leader(c)
	nodes := c.Nodes()
	victim := l
	if ch.rng.IntN(2) == 0 {
		victim = nodes[ch.rng.IntN(len(nodes))]
	}
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	at := time.Now()
	for _, n := range nodes {
		if n == victim {
			n.ClientProxy.Refuse(func(string) bool { return true })
			n.RaftProxy.Refuse(func(string) bool { return true })
		} else {
			n.RaftProxy.Refuse(func(src string) bool { return src == victim.IP })
		}
	}
	if victim == l {
		ch.awaitNewLeader(c, term, at)
	}
	if rest := d - time.Since(at); rest > 0 {
		timer := time.NewTimer(rest)
		<-timer.C
	}
	for _, n := range nodes {
		n.ClientProxy.Refuse(nil)
		n.RaftProxy.Refuse(nil)
	}
	role := "follower"
	if victim == l {
		role = fmt.Sprintf("leader in term %d", term)
	}
	return fmt.Sprintf("cut %s (%s) off for %s", victim.ID, role, d)
}

// clockJump moves a broker group leader's clock 2–30 s forward or back
// for 3–6 s: no delayed message may fire early, and nothing may be lost.
func (ch *Chaos) clockJump(c *Cluster) string {
	l, _ := ch.leader(c)
	j := time.Duration(2000+ch.rng.IntN(28000)) * time.Millisecond
	if ch.rng.IntN(2) == 0 {
		j = -j
	}
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	l.SetClockOffset(j)
	timer := time.NewTimer(d)
	<-timer.C
	l.SetClockOffset(0)
	return fmt.Sprintf("%s's clock (the leader's) moved %s for %s", l.ID, j, d)
}

// slowNode adds 20–150 ms to every chunk through one node's proxies, both
// ways, for 3–6 s.
func (ch *Chaos) slowNode(c *Cluster) string {
	nodes := c.Nodes()
	n := nodes[ch.rng.IntN(len(nodes))]
	lat := time.Duration(20+ch.rng.IntN(130)) * time.Millisecond
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	n.ClientProxy.SetLatency(lat)
	n.RaftProxy.SetLatency(lat)
	timer := time.NewTimer(d)
	<-timer.C
	n.ClientProxy.SetLatency(0)
	n.RaftProxy.SetLatency(0)
	return fmt.Sprintf("%s slowed by %s for %s", n.ID, lat, d)
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

// tornWrite kills a node, tears the tail of its newest message-log segment
// or of a schedule hour's newest records segment past what its checkpoint
// made durable (what a crash could tear), by truncating it or overwriting
// it with random bytes, and restarts it: the node must cut the tail off
// and replay it from Raft.
func (ch *Chaos) tornWrite(c *Cluster) string {
	n := ch.killAny(c)
	fsmDir := filepath.Join(n.DataDir, "fsm")
	ends, err := fsm.ReadDurableEnds(fsmDir)
	if err != nil {
		ch.t.Fatalf("torn write on %s: %v", n.ID, err)
	}
	dir, durable := filepath.Join(fsmDir, "data", "messages"), ends.Messages
	if len(ends.Schedule) > 0 && ch.rng.IntN(3) == 0 {
		var hours []string
		for h := range ends.Schedule {
			hours = append(hours, h)
		}
		sort.Strings(hours)
		h := hours[ch.rng.IntN(len(hours))]
		dir, durable = filepath.Join(fsmDir, "data", "schedule", h), ends.Schedule[h]
	}
	what := ch.tear(dir, durable)
	n.Restart()
	return fmt.Sprintf("%s: %s", n.ID, what)
}

// tear damages the newest segment in dir past logical offset durable.
func (ch *Chaos) tear(dir string, durable int64) string {
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) == 0 {
		return "no segment in " + filepath.Base(dir)
	}
	sort.Strings(segs)
	path := segs[len(segs)-1]
	base, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(path), ".seg"), 10, 64)
	fi, serr := os.Stat(path)
	if err != nil || serr != nil {
		ch.t.Fatalf("tear %s: %v %v", path, err, serr)
	}
	const header = 16 // a segment's header; offsets count records only
	from := max(durable-base, 0) + header
	if fi.Size() <= from {
		return "nothing past the checkpoint in " + filepath.Base(dir)
	}
	cut := from + ch.rng.Int64N(fi.Size()-from)
	if ch.rng.IntN(2) == 0 {
		if err := os.Truncate(path, cut); err != nil {
			ch.t.Fatalf("tear %s: %v", path, err)
		}
		return fmt.Sprintf("truncated %s/%s by %d bytes (past its checkpoint)", filepath.Base(dir), filepath.Base(path), fi.Size()-cut)
	}
	junk := make([]byte, fi.Size()-cut)
	for i := range junk {
		junk[i] = byte(ch.rng.IntN(256))
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(junk, cut)
		f.Close()
	}
	if err != nil {
		ch.t.Fatalf("tear %s: %v", path, err)
	}
	return fmt.Sprintf("overwrote the last %d bytes of %s/%s (past its checkpoint)", len(junk), filepath.Base(dir), filepath.Base(path))
}
