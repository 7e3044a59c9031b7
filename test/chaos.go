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

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// Chaos applies faults from a catalogue (chaos_faults.go and the files
// chaos_*.go) to the groups of a cluster on a seeded random schedule, one
// at a time, healing the cluster after each: SIGKILL and restart of a
// leader, a follower, a random node or a whole group; SIGSTOP of a leader
// for a few seconds; a node (the leader half the time) cut from the rest
// of its group and from clients in both directions; a node whose every
// connection is slowed; a node killed and restarted with the tail of a
// log torn past its checkpoint; a leader's clock jumping forward or back;
// a follower whose clock is ahead made the leader; a leader cut from its
// clients past the consumer session timeout; a broker group cut from the
// metaserver; one-way cuts; full disks (on the group that has small
// disks); a failed checkpoint sync on one node, which must stop by itself
// (SyncFaultGroup); retention lowered for a moment so that it removes
// message-log segments, and a node killed right after it removed them
// (within rules that keep every promise of the history provable:
// chaos_retention.go); every node of a drained, quiet group restarted
// after a leader change on disks too small for a second copy of its data
// (QuietGroup); and a broker group added to a subject's route, the
// subject's first group then made unavailable at the metaserver
// (chaos_routes.go). Partitions, latency, cuts, clock faults and the quiet
// restart need the clusters' proxies (Cluster.UseProxies). The same seed
// gives the same choices (the timing of the processes differs from run to
// run; so may the order of kinds that wait until they can be applied).
// Every kind of fault is applied at least once before any kind drawn by
// weight repeats, so a run long enough for each has each. Clean says
// whether a fault was in flight at a time, and Between runs a function
// between two faults, for workloads whose promises hold only while
// nothing fails (chaos_bulk.go).
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

	// SyncFaultGroup is the broker group whose nodes have sync fault
	// files (Cluster.UseSyncFaults) and checkpoint every few seconds
	// (qmqd --snapshot-interval, --snapshot-threshold 1), for the sync
	// fault; QuietGroup the one, checkpointing as often and on small
	// disks, whose nodes are restarted quiet (quietRestart). Nil: no
	// such fault.
	SyncFaultGroup, QuietGroup *Cluster
	// V1Group, if set, is a broker group kept at version 1 (bootstrapped
	// with --initial-version 1) and PreviousQmqd the previous release's
	// qmqd: the previous-build fault restarts a node of it on that build.
	V1Group      *Cluster
	PreviousQmqd string
	// Narrow lists subjects routed to one broker group each, which the
	// route fault widens one at a time (widenRoute). Empty: no route
	// fault.
	Narrow []NarrowRoute
	// Owed, for the retention fault, returns an error while a send handed
	// to a producer before its argument is still owed to some consumer
	// group (delivered nowhere yet, or its outcome unknown yet), reading
	// the dead letters first; nil Owed: no retention fault.
	Owed func(before time.Time) error

	mu       sync.Mutex
	Schedule []string       // every fault applied, with its time since the start
	Counts   map[string]int // faults applied, by kind
	// Unavailable holds, by fault kind, how long sends to a group were
	// refused after each leader loss.
	Unavailable map[string][]time.Duration
	current     string // the kind of the fault being applied
	// faulting is when the fault being applied began (zero between
	// faults); faults, when each fault applied so far began and when the
	// cluster had healed from it (Clean).
	faulting time.Time
	faults   []span
	// applying is held while a fault is applied and healed (Between).
	applying sync.Mutex
	// widened counts the narrow routes widened so far.
	widened int
}

// span is a stretch of time.
type span struct{ from, to time.Time }

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
	// ready, if set, says whether the fault can be applied yet: one that
	// cannot waits its turn (the next kind goes first).
	ready func(ch *Chaos) bool
}

func (f fault) isReady(ch *Chaos) bool { return f.ready == nil || f.ready(ch) }

// killLeaderFault is every other fault and partitionFault every fourth
// (every eighth while some kind has not been applied yet); the others are
// drawn from otherFaults by weight.
var (
	killLeaderFault = fault{"kill-leader", 0, (*Chaos).killLeader, false, nil, nil}
	partitionFault  = fault{"partition", 0, (*Chaos).partition, false, nil, nil}
	otherFaults     = []fault{
		{"kill-follower", 20, (*Chaos).killFollower, false, nil, nil},
		{"kill-random", 10, (*Chaos).killRandom, false, nil, nil},
		{"kill-group", 5, (*Chaos).killGroup, true, nil, nil},
		{"pause-leader", 20, (*Chaos).pauseLeader, false, nil, nil},
		{"slow-node", 10, (*Chaos).slowNode, false, nil, nil},
		{"torn-write", 15, (*Chaos).tornWrite, true, nil, nil},
		{"clock-jump", 15, (*Chaos).clockJump, true, nil, nil},
		{"wrong-clock-leader", 15, (*Chaos).wrongClockLeader, true, nil, nil},
		{"cut-clients", 10, (*Chaos).cutClients, true, nil, nil},
		{"cut-meta", 10, (*Chaos).cutMeta, true, func(ch *Chaos) *Cluster {
			if ch.meta == nil {
				return nil
			}
			return ch.groups[ch.rng.IntN(len(ch.groups))]
		}, nil},
		{"one-way", 15, (*Chaos).oneWay, false, nil, nil},
		{"disk-full", 15, (*Chaos).diskFull, true, func(ch *Chaos) *Cluster { return ch.DiskGroup }, nil},
		{"sync-fault", 5, (*Chaos).syncFault, true, func(ch *Chaos) *Cluster { return ch.SyncFaultGroup }, nil},
		{"retention-restart", 10, (*Chaos).retentionRestart, true, (*Chaos).pickRetention, (*Chaos).retentionReady},
		{"quiet-restart", 3, (*Chaos).quietRestart, true, func(ch *Chaos) *Cluster { return ch.QuietGroup }, (*Chaos).quietReady},
		{"previous-build", 10, (*Chaos).previousBuild, true, func(ch *Chaos) *Cluster { return ch.V1Group }, nil},
		{"widen-route", 10, (*Chaos).widenRoute, true, (*Chaos).pickWiden, (*Chaos).widenReady},
	}
)

// Run applies faults until d has passed, every other one a leader kill and
// every fourth a partition, the rest from otherFaults: first each kind
// once, in a random order, then drawn by weight. Until each kind has been
// applied once, every other partition's turn goes to the next kind too, so
// that a run of 8 minutes (make ci's) has room for every kind. A kind that
// is not ready yet (fault.ready) waits its turn: the next kind of the
// first round goes first, or one drawn by weight among those ready. Each
// goes to a random group (the metaserver's one time in five) unless it
// picks its own; then Run restarts what the fault stopped, waits for every
// node to catch up, and pauses for 0.5–2 s.
func (ch *Chaos) Run(d time.Duration) {
	var kinds []fault // every kind this run can apply
	for _, f := range otherFaults {
		if ch.Only != nil && !slices.Contains(ch.Only, f.name) {
			continue
		}
		if f.pick == nil || f.pick(ch) != nil {
			kinds = append(kinds, f)
		}
	}
	firsts := append([]fault(nil), kinds...)
	ch.rng.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
	for i, deadline := 0, time.Now().Add(d); time.Now().Before(deadline); i++ {
		f := killLeaderFault
		switch {
		case i%4 == 1 && (len(firsts) == 0 || i%8 == 1):
			f = partitionFault
		case i%4 == 1 || i%4 == 3:
			if j := slices.IndexFunc(firsts, func(f fault) bool { return f.isReady(ch) }); j >= 0 {
				f = firsts[j]
				firsts = slices.Delete(firsts, j, j+1)
			} else if next, ok := ch.draw(kinds); ok {
				f = next
			}
		}
		c := ch.groups[ch.rng.IntN(len(ch.groups))]
		if ch.meta != nil && !f.broker && ch.rng.IntN(5) == 0 {
			c = ch.meta
		}
		if f.pick != nil {
			c = f.pick(ch)
		}
		ch.applying.Lock()
		ch.begin(f.name)
		what := f.apply(ch, c)
		ch.record(f.name, c.Group+": "+what)
		ch.heal(c)
		ch.end()
		ch.applying.Unlock()
		sleepFor(time.Duration(500+ch.rng.IntN(1500)) * time.Millisecond)
	}
}

// draw picks a kind by weight among those ready; false if none is.
func (ch *Chaos) draw(kinds []fault) (fault, bool) {
	var ready []fault
	total := 0
	for _, f := range kinds {
		if f.isReady(ch) {
			ready = append(ready, f)
			total += f.weight
		}
	}
	if total == 0 {
		return fault{}, false
	}
	pick := ch.rng.IntN(total)
	for _, f := range ready {
		if pick < f.weight {
			return f, true
		}
		pick -= f.weight
	}
	panic("unreachable")
}

// begin records that a fault of kind is being applied from now on.
func (ch *Chaos) begin(kind string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.current, ch.faulting = kind, time.Now()
}

// end records that the cluster healed from the fault being applied.
func (ch *Chaos) end() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.faults = append(ch.faults, span{ch.faulting, time.Now()})
	ch.faulting = time.Time{}
}

// Between runs fn between two faults: once the fault being applied, if
// any, has healed, and before the next begins, which waits for fn. Safe
// on any goroutine.
func (ch *Chaos) Between(fn func()) {
	ch.applying.Lock()
	defer ch.applying.Unlock()
	fn()
}

// Clean reports whether no fault was in flight at any moment from from to
// to: none began before to and ended (healed) after from. Safe on any
// goroutine.
func (ch *Chaos) Clean(from, to time.Time) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.faulting.IsZero() && ch.faulting.Before(to) {
		return false
	}
	for _, f := range ch.faults {
		if f.from.Before(to) && f.to.After(from) {
			return false
		}
	}
	return true
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
	gc, err := c.Security().Dialer().NewLeaderClient(addrs)
	if err != nil {
		ch.t.Fatalf("probe %s: %v", c.Group, err)
	}
	defer gc.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprintf("probe-%d-%d", since.UnixNano(), i), Subject: "chaos-probe", CreatedAt: time.Now().UnixMilli()}}}
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
