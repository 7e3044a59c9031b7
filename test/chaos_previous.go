package test

import (
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/version"
)

// previousBuild restarts a node of the chaos run's group at version 1
// (Chaos.V1Group, bootstrapped with qmqd --initial-version 1) on the
// previous release's qmqd (Chaos.PreviousQmqd), on its own data, as an
// operator rolling a node back before finalize; once it caught up with
// its leader and applied what the group went on to commit for a while
// (until the leader applied 200 entries more, or 10 s), it is restarted on
// this build again. The group must be at version 1 throughout: with the
// gate down, this build writes only what the previous one reads, and
// the replica check at the end compares the logs the old build wrote with
// the others'.
func (ch *Chaos) previousBuild(c *Cluster) string {
	ch.t.Helper()
	l, term := ch.leader(c)
	if st, err := l.Status(); err != nil || max(st.ActiveVersion, version.V1) != version.V1 {
		ch.t.Fatalf("previous-build: %s is not at version 1 (%v, %v): the previous build cannot join it", c.Group, st, err)
	}
	n := l
	role := fmt.Sprintf("leader in term %d", term)
	if ch.rng.IntN(3) != 0 {
		n, role = ch.follower(c, l), "follower"
	}
	n.Terminate()
	n.UseBinary(ch.PreviousQmqd)
	n.Restart()
	ch.heal(c)
	// A leader, awaited: an election may follow the heal, and a look
	// between the two finds none (it failed a CI run).
	var from uint64
	c.WaitFor(30*time.Second, c.Group+" has a leader", func() error {
		_, st, err := c.Leader()
		if err == nil {
			from = st.AppliedIndex
		}
		return err
	})
	if err := Poll(10*time.Second, func() error {
		_, st, err := c.Leader()
		if err != nil {
			return err
		}
		if st.AppliedIndex < from+200 {
			return fmt.Errorf("the leader applied %d since", st.AppliedIndex-from)
		}
		return nil
	}); err != nil {
		ch.t.Logf("previous-build: %s ran on the previous build for 10 s: %v", n.ID, err)
	}
	if !n.Running() {
		ch.t.Fatalf("previous-build: %s on the previous build exited: %s", n.ID, tail(n.LogPath, 5))
	}
	n.Terminate()
	n.UseBinary("")
	n.Restart()
	return fmt.Sprintf("%s (%s) restarted on the previous build, caught up, then back on this build", n.ID, role)
}
