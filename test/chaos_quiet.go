package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
)

// quietRestart restarts every node of a quiet broker group after a leader
// change, on disks too small for a second copy of its data. Every new
// leader proposes barriers, which Raft's snapshot index counts and the
// state machine never sees, so a quiet group's next snapshots are a few
// entries ahead of their own checkpoints; a start that took that for being
// behind restored the snapshot, a copy of all the node's data, and with
// less free space than that plus 64 MiB could not start at all.
//
// The fault drains the group (readonly at the metaserver: producers send
// to the subjects' other group) and waits until no delayed message or
// retry is pending in it. Every pull is a Raft entry, even one that finds
// nothing, so a group stays quiet only while no consumer reaches its
// leader: the fault cuts the leader and the follower it will hand
// leadership to from every client (their proxies refuse every connection,
// as cut-clients does, the other nodes' too), and leaves the third node's
// client port open, for the new leader reads its voters' clocks there
// before it proposes anything; a follower's clients are sent to the
// leader and propose nothing. Once the consumers' sessions have
// expired and been reclaimed and the state machine applies nothing more,
// it hands leadership to that follower through the leader's own client
// port behind its proxy, and waits until every node holds a snapshot
// whose Raft index is past what its state machine applied (the group,
// Chaos.QuietGroup, snapshots every 5–10 s with --snapshot-threshold 1):
// past it by barriers and no-ops only, since nothing else came. Then, one
// at a time, it SIGKILLs each node and restarts it with its disk made to
// report 32 MiB more than the group's apply reserve free (qmqd
// --disk-free-file), less than its data (the fault waits its turn until
// the group holds 32 MiB more than that): the third node, the
// old leader, then the new one, once it has handed leadership back to the
// old (so that no restart waits for an election). Each must start without
// restoring anything and rejoin before the next goes. Then the caps, the
// cuts and the drain are undone.
func (ch *Chaos) quietRestart(c *Cluster) string {
	adm := ch.admin(c)
	defer adm.Close()
	nodes := c.Nodes()
	ch.setWritable(adm, c, false)
	c.WaitFor(30*time.Second, c.Group+": every node knows it is drained", func() error {
		for _, n := range nodes {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if !st.ReadOnly {
				return fmt.Errorf("%s is not readonly yet", n.ID)
			}
		}
		return nil
	})
	c.WaitFor(time.Minute, c.Group+": no delayed message or retry pending", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ds, err := adm.Delays(ctx)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if d.BrokerGroup == c.Group && d.Pending > 0 {
				return fmt.Errorf("%d pending on %s", d.Pending, d.Node)
			}
		}
		return nil
	})
	l, _ := ch.leader(c)
	f := ch.follower(c, l)
	var third *Node
	for _, n := range nodes {
		if n != l && n != f {
			third = n
		}
	}
	l.ClientProxy.Refuse(everyone)
	f.ClientProxy.Refuse(everyone)
	cut := time.Now()
	var quiet uint64
	var ahead int
	from, to := l, f
	for attempt := 1; ; attempt++ {
		quiet = ch.awaitQuiet(c, cut)
		ch.transferQuietly(c, from, to)
		err := Poll(30*time.Second, func() error {
			ahead = 0
			for _, n := range nodes {
				st, err := n.Status()
				if err != nil {
					return err
				}
				if st.AppliedIndex != quiet {
					return errNotQuiet
				}
				if snap := newestSnapshot(n); snap <= st.AppliedIndex {
					return fmt.Errorf("%s's newest snapshot is at Raft index %d, its state machine at %d", n.ID, snap, st.AppliedIndex)
				}
				ahead++
			}
			return nil
		})
		if err == nil {
			break
		}
		if attempt == 3 {
			ch.t.Fatalf("%s: after 3 leader changes, not every node holds a snapshot past its state machine with nothing applied since: %v",
				c.Group, err)
		}
		from, to = to, from
	}
	changed := fmt.Sprintf("leadership moved %s → %s", from.ID, to.ID)
	free := ch.quietFree()
	var did []string
	for _, n := range []*Node{third, from, to} {
		if n == to {
			ch.transferQuietly(c, to, from)
		}
		data := dirSize(filepath.Join(n.DataDir, "fsm", "data"))
		if free >= data+64<<20 {
			ch.t.Fatalf("%s holds %d bytes: a disk of %d bytes free is not too small for a second copy", n.ID, data, free)
		}
		snap := newestSnapshot(n)
		n.Kill()
		n.CapDiskFree(free)
		n.Restart()
		c.WaitFor(time.Minute, n.ID+" restarted on a small disk rejoins "+c.Group, func() error {
			sts, err := c.Converged()
			if err != nil {
				return err
			}
			if len(sts) != len(nodes) || sts[n.ID].AppliedIndex < quiet {
				return fmt.Errorf("not all at %d: %s", quiet, Describe(sts))
			}
			return nil
		})
		if log := n.LogSinceStart(); strings.Contains(log, "restoring it") {
			ch.t.Fatalf("%s restored its snapshot on start, with nothing newer in it", n.ID)
		}
		did = append(did, fmt.Sprintf("%s (%d MiB of data, snapshot at %d)", n.ID, data>>20, snap))
	}
	for _, n := range nodes {
		n.CapDiskFree(-1)
		n.ClientProxy.Refuse(nil)
	}
	ch.setWritable(adm, c, true)
	c.WaitFor(30*time.Second, c.Group+": every node knows it is writable again", func() error {
		for _, n := range nodes {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if st.ReadOnly {
				return fmt.Errorf("%s is still readonly", n.ID)
			}
		}
		return nil
	})
	return fmt.Sprintf("drained; %s and %s cut from clients; quiet at index %d; %s; every node's snapshot ahead of its state machine (%d of %d); "+
		"restarted %s, each seeing %d MiB free; undone", l.ID, f.ID, quiet, changed, ahead, len(nodes), strings.Join(did, ", "), free>>20)
}

// quietFree is the free space the quiet restart's nodes see: 32 MiB
// beyond the apply reserve, enough to apply what a quiet group does.
func (ch *Chaos) quietFree() int64 { return ch.DiskReserve + 32<<20 }

// quietReady says whether the quiet group holds more data than the quiet
// restart leaves free, so that not even a bare second copy would fit.
func (ch *Chaos) quietReady() bool {
	for _, n := range ch.QuietGroup.Nodes() {
		if n.Running() {
			return dirSize(filepath.Join(n.DataDir, "fsm", "data")) > ch.quietFree()+32<<20
		}
	}
	return false
}

// errNotQuiet means a quiet group's state machine applied something.
var errNotQuiet = fmt.Errorf("the state machine applied more: not quiet")

// awaitQuiet waits until group c, cut from its clients at cut, has had
// time to reclaim its consumers (the session timeout, and a second) and
// its leader's state machine has applied nothing for 2 s; it returns the
// applied index.
func (ch *Chaos) awaitQuiet(c *Cluster, cut time.Time) uint64 {
	var applied uint64
	since := time.Now()
	c.WaitFor(time.Minute, c.Group+" quiet", func() error {
		_, st, err := c.Leader()
		if err != nil {
			return err
		}
		if st.AppliedIndex != applied {
			applied, since = st.AppliedIndex, time.Now()
		}
		if time.Since(cut) < ch.SessionTimeout+time.Second || time.Since(since) < 2*time.Second {
			return fmt.Errorf("applied %d since %s", applied, since.Format("15:04:05.000"))
		}
		return nil
	})
	return applied
}

// transferQuietly hands group c's leadership to node to, from whichever
// node leads (from, unless an election moved it meanwhile: the cut and a
// loaded host can cost a leader its quorum), through the leader's own
// client port, not its proxy (which may refuse clients), and waits until
// to leads. A group that elected to by itself is left as it is.
func (ch *Chaos) transferQuietly(c *Cluster, from, to *Node) {
	var err error
	for try := 1; try <= 3; try++ {
		l, term := ch.leader(c)
		if l == to {
			return
		}
		from = l
		gc, gerr := c.Security().Dialer().NewLeaderClient([]string{from.ClientBind})
		if gerr != nil {
			ch.t.Fatalf("transfer in %s: %v", c.Group, gerr)
		}
		body, _ := json.Marshal(transport.TransferRequest{ID: to.ID})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = gc.Call(ctx, transport.TypeTransfer, body)
		cancel()
		gc.Close()
		if err != nil {
			continue // the leader changed under the request, say: look again
		}
		c.WaitFor(30*time.Second, to.ID+" leads "+c.Group, func() error {
			st, err := to.Status()
			if err != nil {
				return err
			}
			if st.State != "Leader" || st.Term <= term {
				return fmt.Errorf("%s: %s in term %d", to.ID, st.State, st.Term)
			}
			return nil
		})
		return
	}
	ch.t.Fatalf("transferring %s's leadership from %s to %s: %v", c.Group, from.ID, to.ID, err)
}

// setWritable drains broker group c at the metaserver (false) or opens it
// again, trying again for up to 30 s.
func (ch *Chaos) setWritable(adm *admin.Client, c *Cluster, writable bool) {
	ch.t.Helper()
	err := Poll(30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return adm.SetWritable(ctx, c.Group, writable)
	})
	if err != nil {
		ch.t.Fatalf("setting %s writable %t: %v", c.Group, writable, err)
	}
}

// newestSnapshot returns the Raft index of broker node n's newest stored
// snapshot (its directory is named term-index-time), 0 if none.
func newestSnapshot(n *Node) uint64 {
	entries, _ := os.ReadDir(filepath.Join(n.DataDir, "snapshots"))
	var newest uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if !e.IsDir() || len(parts) != 3 || strings.Contains(e.Name(), ".") {
			continue
		}
		if i, err := strconv.ParseUint(parts[1], 10, 64); err == nil {
			newest = max(newest, i)
		}
	}
	return newest
}

// dirSize returns the bytes of the files under dir.
func dirSize(dir string) int64 {
	var size int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return size
}
