package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// The fault catalogue of Chaos: each applies one fault to a group and
// returns what it did, for the schedule.

func (ch *Chaos) killLeader(c *Cluster) string {
	l, term := ch.leader(c)
	at := time.Now()
	l.Kill()
	ch.awaitNewLeader(c, term, at)
	return fmt.Sprintf("SIGKILL %s (leader in term %d)", l.ID, term)
}

// follower returns a random node of the group other than its leader l.
func (ch *Chaos) follower(c *Cluster, l *Node) *Node {
	var followers []*Node
	for _, n := range c.Nodes() {
		if n != l {
			followers = append(followers, n)
		}
	}
	return followers[ch.rng.IntN(len(followers))]
}

// victim returns a node of the group to fault: its leader half the time,
// else any node; with the leader and its term, and the victim's role.
func (ch *Chaos) victim(c *Cluster) (victim, leader *Node, term uint64, role string) {
	leader, term = ch.leader(c)
	victim = leader
	if ch.rng.IntN(2) == 0 {
		nodes := c.Nodes()
		victim = nodes[ch.rng.IntN(len(nodes))]
	}
	role = "follower"
	if victim == leader {
		role = fmt.Sprintf("leader in term %d", term)
	}
	return victim, leader, term, role
}

func (ch *Chaos) killFollower(c *Cluster) string {
	l, _ := ch.leader(c)
	f := ch.follower(c, l)
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
	sleepFor(d - time.Since(at))
	l.Resume()
	return fmt.Sprintf("SIGSTOP %s (leader in term %d) for %s", l.ID, term, d)
}

// partition cuts one node of the group (the leader half the time) from the
// others and from clients, in both directions, for 3–6 s: its proxies
// refuse every connection, and the others' Raft proxies refuse its.
func (ch *Chaos) partition(c *Cluster) string {
	victim, l, term, role := ch.victim(c)
	nodes := c.Nodes()
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
	sleepFor(d - time.Since(at))
	for _, n := range nodes {
		n.ClientProxy.Refuse(nil)
		n.RaftProxy.Refuse(nil)
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
	sleepFor(d)
	l.SetClockOffset(0)
	return fmt.Sprintf("%s's clock (the leader's) moved %s for %s", l.ID, j, d)
}

// wrongClockLeader sets a broker follower's clock 30 s–2 h ahead, makes it
// the leader with a transfer-leader request, lets it lead for 3–6 s while
// delayed messages are being sent, then sets its clock right: a node
// elected with its clock already ahead must fire nothing early, let no
// dedup window pass early, and lose nothing.
func (ch *Chaos) wrongClockLeader(c *Cluster) string {
	l, term := ch.leader(c)
	f := ch.follower(c, l)
	ahead := 30*time.Second + time.Duration(ch.rng.Int64N(int64(2*time.Hour-30*time.Second))).Round(time.Second)
	d := time.Duration(3000+ch.rng.IntN(3000)) * time.Millisecond
	f.SetClockOffset(ahead)
	defer f.SetClockOffset(0)
	if err := Poll(10*time.Second, func() error { return clockAhead(f, ahead) }); err != nil {
		ch.t.Fatalf("%s's clock offset: %v", f.ID, err)
	}
	adm, err := admin.New(c.ClientAddrs(), c.Security().OperatorConnOption())
	if err != nil {
		ch.t.Fatalf("transfer-leader in %s: %v", c.Group, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	at := time.Now()
	err = adm.TransferLeader(ctx, c.Group, f.ID)
	cancel()
	adm.Close()
	if err != nil {
		return fmt.Sprintf("%s's clock set %s ahead; the transfer of leadership from %s failed: %v", f.ID, ahead, l.ID, err)
	}
	ch.awaitNewLeader(c, term, at)
	sleepFor(d - time.Since(at))
	who := f.ID + " led"
	if now, _, err := c.Leader(); err != nil || now != f {
		who = f.ID + " was made the leader but lost it"
	}
	return fmt.Sprintf("%s's clock set %s ahead, then leadership moved to it from %s (term %d); %s for %s", f.ID, ahead, l.ID, term, who, d)
}

// clockAhead reports whether broker node n's clock reads at least about
// ahead in front of the machine's, asking it with a time request (a
// node's request: over TLS, with the operator's node certificate).
func clockAhead(n *Node, ahead time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := n.c.Security().Dialer().Dial(ctx, n.ClientAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	body, err := conn.Call(ctx, transport.TypeTime, nil)
	if err != nil {
		return err
	}
	var r struct {
		UnixMS int64 `json:"unix_ms"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return err
	}
	if got := time.UnixMilli(r.UnixMS).Sub(time.Now()); got < ahead-time.Second {
		return fmt.Errorf("%s reads %s ahead, not yet %s", n.ID, got.Round(time.Millisecond), ahead)
	}
	return nil
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
	sleepFor(d)
	n.ClientProxy.SetLatency(0)
	n.RaftProxy.SetLatency(0)
	return fmt.Sprintf("%s slowed by %s for %s", n.ID, lat, d)
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
