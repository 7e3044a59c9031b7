package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
)

// The retention fault lowers a broker group's retention age for a moment,
// so that retention removes old message-log segments while the run goes
// on, and SIGKILLs a node right after it removed them. Retention must
// never remove what the history still expects delivered, so the fault
// keeps to these rules:
//
//   - Retention removes a sealed segment when the next segment's first
//     message was appended (at the leader's stamped time) more than the
//     retention age A before the send being applied. Set to A from the
//     moment of the change until the moment the original age is back (t),
//     it removes only messages appended before t−A.
//   - Before lowering it, the fault waits until nothing handed to a
//     producer before retentionLead ago is owed any more (Chaos.Owed):
//     every such send has an outcome, and each acknowledged one reached
//     every at-least-once group (acknowledged by its handler, or a dead
//     letter read with the admin, which the history keeps: a dead letter
//     retention later removes is still counted as arrived) and the
//     broadcast group if it had joined. At-most-once groups are owed
//     nothing.
//   - It gives the original age back by the deadline X−retentionSkew+A,
//     X being the fault's start less retentionLead: so t−A is before X by
//     retentionSkew, the most a leader's stamp may lag the machine's clock
//     between faults (the nodes share one clock; a leader's term clock
//     only ever lags it). Past the deadline the run fails: the history's
//     promises could no longer be proved.
//
// A is the group's dedup window, at least retentionMinAge (the budget
// below needs it): retention may not go below the window (a send retried
// after its message was removed would be stored twice). The run seeds a
// window of 2 minutes, so that the fault can come once the run is a few
// minutes old.
const (
	retentionLead   = 30 * time.Second
	retentionSkew   = 10 * time.Second
	retentionMinAge = 2 * time.Minute
	// retentionMaxWindow is the longest dedup window the fault works
	// with: a longer one needs segments older than a run is.
	retentionMaxWindow = 5 * time.Minute
)

// retentionRestart makes retention remove message-log segments of the
// group, SIGKILLs a node (the leader half the time) as soon as its
// message log's start moves, puts the retention age back, and restarts
// the node: it must finish the removal and the groups' adjustments to it
// on open (cursors, redeliveries and dead letters of removed messages)
// and end byte-identical to the others.
func (ch *Chaos) retentionRestart(c *Cluster) string {
	start := time.Now()
	x := start.Add(-retentionLead)
	cfg, err := groupConfig(c)
	if err != nil {
		ch.t.Fatalf("retention fault on %s: %v", c.Group, err)
	}
	age := max(cfg.DedupWindow, retentionMinAge)
	deadline := x.Add(age - retentionSkew)
	// Up to 30 s of the budget, leaving 20 s to lower the age, 30 s for the
	// removal and the restart, and what is left to set it back.
	if err := Poll(time.Until(deadline)-50*time.Second, func() error { return ch.Owed(x) }); err != nil {
		return fmt.Sprintf("skipped: sends handed over more than %s before are still owed (%v)", retentionLead, err)
	}
	victim, _, _, role := ch.victim(c)
	from, err := messageLogStart(victim)
	if err != nil {
		ch.t.Fatalf("retention fault on %s: %v", c.Group, err)
	}
	adm := ch.admin(c)
	defer adm.Close()
	ch.setRetentionAge(adm, c, age, 20*time.Second)
	lowered := time.Now()
	var to int64
	removed := Poll(time.Until(deadline)-30*time.Second, func() error {
		var err error
		if to, err = messageLogStart(victim); err == nil && to == from {
			err = fmt.Errorf("%s's message log still starts at %d", victim.ID, from)
		}
		return err
	}) == nil
	// The leader changes the configuration only while every voter answers
	// (each must be able to apply it), so the age goes back once the
	// victim is up again.
	redone := ""
	if removed {
		victim.Kill()
		victim.Restart()
		c.WaitFor(time.Minute, victim.ID+" answers after its restart", func() error { _, err := victim.Status(); return err })
		redone = "its checkpoint after the removal had come already"
		if strings.Contains(victim.LogSinceStart(), "finishing retention's removal") {
			redone = "it finished the removal on open"
		}
	}
	ch.setRetentionAge(adm, c, cfg.RetentionAge, time.Until(deadline))
	if back := time.Now(); back.After(deadline) {
		ch.t.Fatalf("%s's retention age was %s from %s to %s, past its deadline %s: messages not yet proved delivered may be gone",
			c.Group, age, lowered.Format("15:04:05.000"), back.Format("15:04:05.000"), deadline.Format("15:04:05.000"))
	}
	held := time.Since(lowered).Round(time.Millisecond)
	if !removed {
		return fmt.Sprintf("retention age %s for %s removed nothing on %s (its message log starts at %d); back to %s",
			age, held, victim.ID, from, cfg.RetentionAge)
	}
	return fmt.Sprintf("retention age %s for %s: %s's message log start moved %d → %d; SIGKILL %s (%s) then, restarted (%s); back to %s",
		age, held, victim.ID, from, to, victim.ID, role, redone, cfg.RetentionAge)
}

// pickRetention chooses a broker group for the retention fault: one whose
// message log has a segment old enough to go, else any whose dedup window
// lets the fault work; nil if none (or Chaos.Owed is nil).
func (ch *Chaos) pickRetention() *Cluster {
	if ch.Owed == nil {
		return nil
	}
	var ready, able []*Cluster
	for _, c := range ch.groups {
		age, ok := retentionAgeOf(c)
		if !ok {
			continue
		}
		able = append(able, c)
		if segmentOlderThan(c, age+5*time.Second) {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		ready = able
	}
	if len(ready) == 0 {
		return nil
	}
	return ready[ch.rng.IntN(len(ready))]
}

// retentionReady says whether some broker group has a message-log segment
// the lowered retention age would remove at once.
func (ch *Chaos) retentionReady() bool {
	for _, c := range ch.groups {
		if age, ok := retentionAgeOf(c); ok && segmentOlderThan(c, age+5*time.Second) {
			return true
		}
	}
	return false
}

// retentionAgeOf returns the age the retention fault lowers c's retention
// to, and whether it can (its dedup window is short enough).
func retentionAgeOf(c *Cluster) (time.Duration, bool) {
	cfg, err := groupConfig(c)
	if err != nil || cfg.DedupWindow > retentionMaxWindow {
		return 0, false
	}
	return max(cfg.DedupWindow, retentionMinAge), true
}

// segmentOlderThan says whether a running node of broker group c holds a
// sealed message-log segment last written more than age ago: one whose
// successor's first message is about that old.
func segmentOlderThan(c *Cluster, age time.Duration) bool {
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		segs, err := filepath.Glob(filepath.Join(n.DataDir, "fsm", "data", "messages", "*.seg"))
		if err != nil || len(segs) < 2 {
			return false
		}
		slices.Sort(segs)
		fi, err := os.Stat(segs[0])
		return err == nil && time.Since(fi.ModTime()) > age
	}
	return false
}

// messageLogStart returns where broker node n's message log starts: its
// first segment's base offset.
func messageLogStart(n *Node) (int64, error) {
	segs, err := filepath.Glob(filepath.Join(n.DataDir, "fsm", "data", "messages", "*.seg"))
	if err != nil || len(segs) == 0 {
		return 0, fmt.Errorf("%s's message log: no segment (%v)", n.ID, err)
	}
	slices.Sort(segs)
	return strconv.ParseInt(strings.TrimSuffix(filepath.Base(segs[0]), ".seg"), 10, 64)
}

// groupConfig returns broker group c's configuration as a running node's
// /status shows it.
func groupConfig(c *Cluster) (*transport.BrokerConfig, error) {
	var errs []string
	for _, n := range c.Nodes() {
		if !n.Running() {
			continue
		}
		st, err := n.Status()
		if err == nil && st.BrokerConfig != nil {
			return st.BrokerConfig, nil
		}
		errs = append(errs, fmt.Sprint(err))
	}
	return nil, fmt.Errorf("no node of %s shows its configuration: %s", c.Group, strings.Join(errs, "; "))
}

// admin returns an admin.Client of the cluster, as an operator (a node
// certificate); close it.
func (ch *Chaos) admin(c *Cluster) *admin.Client {
	servers := c.ClientAddrs()
	if ch.meta != nil {
		servers = ch.meta.ClientAddrs()
	}
	a, err := admin.New(servers, c.Security().OperatorConnOption())
	if err != nil {
		ch.t.Fatalf("admin of %s: %v", c.Group, err)
	}
	return a
}

// setRetentionAge sets broker group c's retention age through its leader
// (qmqctl config set --retention-age), trying again for up to within
// while the group has no leader or a voter does not answer.
func (ch *Chaos) setRetentionAge(adm *admin.Client, c *Cluster, age, within time.Duration) {
	ch.t.Helper()
	err := Poll(within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := adm.SetBrokerGroupConfig(ctx, c.Group, admin.BrokerGroupConfigChanges{RetentionAge: &age})
		if err == nil && got.Config.RetentionAge != age {
			err = fmt.Errorf("the leader holds a retention age of %s", got.Config.RetentionAge)
		}
		return err
	})
	if err != nil {
		ch.t.Fatalf("setting %s's retention age to %s: %v", c.Group, age, err)
	}
}
