package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/version"
)

// TestRollingUpgrade walks the upgrade procedure of docs/upgrading.md
// from the previous release (previousRelease) under load:
// a metaserver group and a broker group of three nodes each, all on the
// previous build, while producers of this SDK send (a tenth delayed by
// up to 8 s, and a few due in an hour) and consumer groups acknowledge
// (one fails a tenth of the messages once, so they are retried), and the
// previous build's qmqctl sends too (its SDK against every mix of
// servers). Each node is stopped and restarted on this build on its own
// data and addresses, the metaserver's first, then the broker group's
// followers, then its leader, each waited for until it caught up. Then,
// the group still at version 1, a follower goes back to the previous
// build: stopped while the group moves on past the entries its leader
// keeps, it installs a snapshot of this build's and replays on its own
// checkpoint, then returns to this build. qmqctl upgrade finalize --all
// (this build's) raises the broker group and the metaserver group to 2,
// and upgrade status shows both there. A follower restarted on the previous build then exits
// without serving (downgradeRefused), and the group carries on with the
// other two. Checked: no acknowledged send lost, none failed (the SDK's
// retries hide every restart), every acknowledged message consumed
// within a deadline after the load stops (the delayed ones that came due
// fired, none early), the hour-ahead ones not delivered, and the replicas
// byte-identical.
func TestRollingUpgrade(t *testing.T) {
	oldQmqd, oldQmqctl := PreviousRelease(t)
	testStart := time.Now()
	meta := NewMetaGroup(t, "--election-timeout", "500ms")
	for _, id := range []string{"m1", "m2", "m3"} {
		meta.SetNodeBinary(id, oldQmqd)
	}
	meta.Form("", "m1", "m2", "m3")
	servers := meta.ClientAddrs()
	// A snapshot, which is the state machine's checkpoint, every 1–2 s:
	// every restart opens a checkpoint of the build it stopped on.
	g := NewCluster(t, "g1", "--meta", servers, "--election-timeout", "500ms", "--session-timeout", "3s",
		"--snapshot-interval", "1s", "--snapshot-threshold", "1")
	for _, id := range []string{"a", "b", "c"} {
		g.SetNodeBinary(id, oldQmqd)
	}
	g.Form(servers, "a", "b", "c")
	for _, c := range []*Cluster{meta, g} {
		for _, n := range c.Nodes() {
			if st, err := n.Status(); err != nil || st.Versions != nil {
				t.Fatalf("%s on the previous build: versions %v, %v (it has none)", n.ID, st.Versions, err)
			}
		}
	}

	adm, err := admin.New(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	subjects := []string{"orders", "payments"}
	setUpRetryingGroup(t, meta, adm, subjects)
	h := NewHistory()
	e := Expectations{AtLeastOnce: []string{"billing", retryingGroup}}
	var subs []*qmq.Subscription
	subscribe := func(subject, group string, hd qmq.Handler) {
		sub, err := qmq.Subscribe(servers, subject, group, hd, qmq.WithPullWait(500*time.Millisecond), qmq.WithWorkers(2),
			qmq.StartAt(qmq.Earliest), qmq.WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	for _, s := range subjects {
		subscribe(s, "billing", func(_ context.Context, m *qmq.Message) error {
			h.Delivered("billing", m, time.Now())
			return nil
		})
		subscribe(s, retryingGroup, func(_ context.Context, m *qmq.Message) error {
			if failsOnce(m.ID()) && m.Deliveries() == 1 {
				h.Nacked(retryingGroup, m, time.Now())
				return fmt.Errorf("failing message %s once", m.ID())
			}
			h.Delivered(retryingGroup, m, time.Now())
			return nil
		})
	}
	closeSubs := func() {
		for _, s := range subs {
			s.Close()
		}
		subs = nil
	}
	defer closeSubs()

	// Messages due in an hour: held through every restart, never delivered
	// (the history does not know them: delivered, they are unexpected).
	holdForLater(t, servers, subjects[0], 20)

	stop := make(chan struct{})
	var senders sync.WaitGroup
	for i, w := range []producer{{subjects: subjects, seed: 1, timeout: 30 * time.Second},
		{subjects: subjects, seed: 2, window: 20, timeout: 30 * time.Second}} {
		senders.Add(1)
		go func() {
			defer senders.Done()
			w.seed += uint64(testStart.UnixNano()) + uint64(i)
			send(t, h, servers, qmq.ConnOption{}, w, stop)
		}()
	}
	var oldSends, oldFailed atomic.Int64
	senders.Add(1)
	go func() {
		defer senders.Done()
		sendWithCtl(t, h, oldQmqctl, servers, subjects[1], stop, &oldSends, &oldFailed)
	}()
	stopLoad := func() {
		if stop != nil {
			close(stop)
			senders.Wait()
			stop = nil
		}
	}
	defer stopLoad()
	// Each step goes on until this SDK's producers had n more sends
	// acknowledged and the previous qmqctl two more runs.
	awaitAcked := func(n int, what string) {
		start, ctl := h.AckedCount(), oldSends.Load()
		g.WaitFor(60*time.Second, fmt.Sprintf("%d more sends acknowledged %s", n, what), func() error {
			if got, runs := h.AckedCount()-start, (oldSends.Load()-ctl)/5; got < n || runs < 2 {
				return fmt.Errorf("%d acknowledged, %d runs of the previous qmqctl", got, runs)
			}
			return nil
		})
	}
	awaitAcked(300, "on the previous build")

	// The metaserver first, then the broker group's followers, then its
	// leader: each stopped (SIGTERM: a leader hands over) and restarted on
	// this build, on its own data.
	for _, n := range meta.Nodes() {
		upgradeNode(t, meta, n, "")
	}
	awaitAcked(100, "with the metaserver on this build")
	leader, _, err := g.Leader()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes() {
		if n != leader {
			upgradeNode(t, g, n, "")
			awaitAcked(100, "with "+n.ID+" on this build")
		}
	}
	upgradeNode(t, g, leader, "")
	awaitAcked(100, "with every node on this build")
	if v := activeVersion(t, g); v != version.V1 {
		t.Fatalf("the group is at version %d after the nodes' upgrade, want 1 until finalize", v)
	}

	// Back to the previous build while the group is at version 1: a
	// follower stopped until its leader compacted its log past it
	// installs a snapshot (this build's, at version 1) and applies what
	// this build's leader proposes.
	back := follower(t, g)
	downgradeCatchesUp(t, g, back, oldQmqd)
	awaitAcked(100, "with "+back.ID+" on the previous build")
	upgradeNode(t, g, back, "")

	// Finalize with this build's qmqctl: every broker group, then the
	// metaserver group, each formed by the previous release at 1.
	if out, err := g.Ctl("--server", servers, "upgrade", "finalize", "--all"); err != nil {
		t.Fatal(err)
	} else if !strings.Contains(out, "broker group "+g.Group+": version 2, was 1") || !strings.Contains(out, "the metaserver group: version 2, was 1") {
		t.Fatalf("qmqctl upgrade finalize --all: %s", out)
	}
	var view []struct {
		Group  string `json:"group"`
		Active uint32 `json:"active"`
	}
	if err := g.CtlJSON(&view, "--server", servers, "upgrade", "status"); err != nil {
		t.Fatal(err)
	}
	if !upgraded(view, g.Group) || !upgraded(view, admin.MetaGroup) {
		t.Fatalf("qmqctl upgrade status after finalize: %+v, want %s and %s at 2", view, g.Group, admin.MetaGroup)
	}
	awaitAcked(100, "at version 2")

	// The previous build on a group at version 2 exits without serving.
	refused := follower(t, g)
	downgradeRefused(t, g, refused, oldQmqd)
	awaitAcked(100, "with "+refused.ID+" out")
	upgradeNode(t, g, refused, "")

	stopLoad()
	err = Poll(time.Minute, func() error {
		if n := h.Undelivered(e); n > 0 {
			return fmt.Errorf("%d acknowledged messages not consumed by every group", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("a minute after the load stopped: %v", err)
	}
	closeSubs()
	readDeadLetters(t, h, adm, subjects, retryingGroup, true)
	report := h.Check(e)
	t.Logf("rolling upgrade: %s; previous qmqctl: %d sends, %d failed", report, oldSends.Load(), oldFailed.Load())
	if !report.OK() {
		t.Fatalf("rolling upgrade broke a promise: %s", report)
	}
	if report.Unknown > 0 || oldFailed.Load() > 0 {
		t.Fatalf("%d sends of this SDK and %d of the previous qmqctl failed beyond the SDK's retries", report.Unknown, oldFailed.Load())
	}
	if report.Delayed == 0 || report.Nacked[retryingGroup] == 0 || oldSends.Load() == 0 {
		t.Fatalf("%d delayed, %d retried, %d sends of the previous qmqctl: the run proves little", report.Delayed, report.Nacked[retryingGroup], oldSends.Load())
	}
	g.SameReplicas(time.Minute)
	t.Logf("rolling upgrade: done in %s", time.Since(testStart).Round(time.Second))
}

// upgraded says whether the upgrade status view shows group at version 2.
func upgraded(view []struct {
	Group  string `json:"group"`
	Active uint32 `json:"active"`
}, group string) bool {
	for _, g := range view {
		if g.Group == group {
			return g.Active == uint32(version.V2)
		}
	}
	return false
}

// holdForLater sends n messages due in an hour to subject.
func holdForLater(t *testing.T, servers, subject string, n int) {
	t.Helper()
	p, err := qmq.NewProducer(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range n {
		m := p.GenerateMessage(subject)
		m.SetDelay(time.Hour)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := p.SendMessage(ctx, m)
		cancel()
		if err != nil {
			t.Fatalf("a message due in an hour: %v", err)
		}
	}
}

// sendWithCtl sends to subject with the qmqctl at ctl, five messages a
// run, until stop, recording each acknowledged id in h and counting the
// messages sent and those a run failed to send.
func sendWithCtl(t *testing.T, h *History, ctl, servers, subject string, stop chan struct{}, sent, failed *atomic.Int64) {
	const batch = 5
	p, err := qmq.NewProducer(servers) // its messages stand for qmqctl's in h
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	for {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, ctl, "--server", servers, "send", "--subject", subject, "--count", fmt.Sprint(batch), "--timeout", "30s", "sent by qmqctl")
		out, err := cmd.Output()
		cancel()
		ids := strings.Fields(string(out))
		for _, id := range ids {
			m := p.GenerateMessage(subject)
			if err := m.SetID(id); err != nil {
				t.Errorf("qmqctl send printed %q: %v", id, err)
				return
			}
			h.Sending(m)
			h.Sent(m, nil)
		}
		sent.Add(batch)
		if err != nil || len(ids) != batch {
			failed.Add(int64(batch - len(ids)))
			t.Logf("qmqctl send: %d of %d acknowledged: %v", len(ids), batch, err)
		}
		sleepFor(200 * time.Millisecond)
	}
}

// activeVersion returns the group's active version as its leader reports
// it (1 where none is recorded).
func activeVersion(t *testing.T, c *Cluster) version.Number {
	t.Helper()
	_, st, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	return max(st.ActiveVersion, version.V1)
}

// follower returns a running node of c that does not lead.
func follower(t *testing.T, c *Cluster) *Node {
	t.Helper()
	leader, _, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		if n != leader && n.Running() {
			return n
		}
	}
	t.Fatalf("%s: no follower runs", c.Group)
	return nil
}

// upgradeNode stops n and restarts it on the qmqd at bin ("": this
// build's), on its own data and addresses, and waits until it caught up.
func upgradeNode(t *testing.T, c *Cluster, n *Node, bin string) {
	t.Helper()
	n.Terminate()
	n.UseBinary(bin)
	n.Restart()
	caughtUp(t, c, n)
}

// caughtUp waits until every node of c answers under one leader and n
// applied what that leader had applied when the wait began.
func caughtUp(t *testing.T, c *Cluster, n *Node) {
	t.Helper()
	var target uint64
	c.WaitFor(60*time.Second, n.ID+" caught up", func() error {
		if !n.Running() {
			return fmt.Errorf("%s exited: %s", n.ID, tail(n.LogPath, 3))
		}
		sts, err := c.Statuses()
		if err != nil {
			return err
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
		if st := sts[n.ID]; st == nil || st.Leader != leader || st.AppliedIndex < target {
			return fmt.Errorf("%s not caught up to %d under %s: %s", n.ID, target, leader, Describe(sts))
		}
		return nil
	})
}

// downgradeCatchesUp stops follower n while the group goes on, until its
// leader applied more entries past it than a leader keeps in its log
// (1,024) so that it installs a snapshot, if the load gets there within
// 30 s, and restarts it on the previous build (old), which must rejoin
// and catch up.
func downgradeCatchesUp(t *testing.T, c *Cluster, n *Node, old string) {
	t.Helper()
	// A snapshot taken from now on is this build's: the checkpoint it
	// writes is the one the previous build will open.
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor(30*time.Second, n.ID+" took a snapshot on this build", func() error {
		now, err := n.Status()
		if err != nil {
			return err
		}
		if now.LastSnapshotIndex <= st.AppliedIndex {
			return fmt.Errorf("its newest snapshot is at %d, it applied %d before", now.LastSnapshotIndex, st.AppliedIndex)
		}
		st = now
		return nil
	})
	n.Terminate()
	if err := Poll(30*time.Second, func() error {
		_, lst, err := c.Leader()
		if err != nil {
			return err
		}
		if lst.LastSnapshotIndex < st.AppliedIndex+1100 {
			return fmt.Errorf("the leader's snapshot is at %d, %s stopped at %d", lst.LastSnapshotIndex, n.ID, st.AppliedIndex)
		}
		return nil
	}); err != nil {
		t.Logf("%s may catch up from the log: %v", n.ID, err)
	}
	// This build wrote the checkpoint the previous one opens: at
	// version 1 in a form (checkpoint version 4 or 5) that one reads.
	cp, err := os.ReadFile(filepath.Join(n.DataDir, "fsm", "data", "checkpoint"))
	if err != nil || len(cp) == 0 || cp[0] > 5 {
		t.Fatalf("%s's checkpoint, of this build at version 1: %d bytes, version %v, %v: the previous build reads versions 1-5", n.ID, len(cp), cp[:min(len(cp), 1)], err)
	}
	n.UseBinary(old)
	n.Restart()
	caughtUp(t, c, n)
	if after, err := n.Status(); err != nil || after.Versions != nil {
		t.Fatalf("%s on the previous build: %v, %v", n.ID, after, err)
	}
}

// downgradeRefused restarts follower n on the previous build (old) on a
// group at version 2: it must exit without serving. eb696dd replays its
// log from its checkpoint and meets the entry that raised the group
// (fsm.SetVersion, type 15), which it does not know: its state machine
// panics (fsm.ErrUnknownCommand: "this node must be upgraded to the
// version of the leader that proposed it"), and the process exits with
// status 2, having applied nothing of version 2. (A checkpoint written
// after the raise, of version 8, it would refuse to open.)
func downgradeRefused(t *testing.T, c *Cluster, n *Node, old string) {
	t.Helper()
	n.Terminate()
	n.UseBinary(old)
	n.Restart()
	n.ExpectExit()
	exited, err := n.AwaitExit(60 * time.Second)
	if !exited {
		t.Fatalf("%s on the previous build still runs on a group at version 2; its log: %s", n.ID, tail(n.LogPath, 5))
	}
	var ee *exec.ExitError
	log := n.LogSinceStart()
	panicked := errors.As(err, &ee) && ee.ExitCode() == 2 && strings.Contains(log, "unknown type or version: type 15: this node must be upgraded")
	// Had it taken a snapshot after the raise, its checkpoint would be
	// of version 8, which the previous build refuses to open.
	refused := errors.As(err, &ee) && ee.ExitCode() != 0 && strings.Contains(log, "malformed checkpoint: unknown version 8")
	if !panicked && !refused {
		t.Fatalf("%s on the previous build on a group at version 2 exited with %v, want status 2 and the state machine's panic at the set-version entry "+
			"(or a refusal of its checkpoint); its log: %s", n.ID, err, log)
	}
	t.Logf("%s on the previous build on a group at version 2 exited with %v: %s%s", n.ID, err, firstLine(log, "panic: "), firstLine(log, "malformed checkpoint"))
}

// firstLine returns the first line of s that holds sub.
func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
