package test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// TestKillLeaderWhileSending runs a three-node group as real processes,
// SIGKILLs the leader halfway through 10,000 sends, restarts it once a new
// leader is elected, and checks that every acknowledged message can be
// consumed, that nothing unsent appears, and that the restarted node
// catches up.
func TestKillLeaderWhileSending(t *testing.T) {
	const (
		group   = "g1"
		subject = "orders"
		total   = 10000
		workers = 32 // concurrent SendMessage callers: the producer batches them
		// sendTimeout bounds one message, the SDK's retries included; a
		// failure is acceptable only once it has run out.
		sendTimeout = 20 * time.Second
	)
	testStart := time.Now()
	c := NewCluster(t, group, "--election-timeout", "500ms")

	// Form the group: n1 bootstraps, n2 and n3 join with qmqctl.
	n1 := c.Start("n1", true)
	c.WaitFor(20*time.Second, "n1 leads and reports its leader_addr", func() error {
		st, err := n1.Status()
		if err != nil {
			return err
		}
		if st.State != "Leader" || st.LeaderAddr == "" {
			return fmt.Errorf("n1: state %s, leader_addr %q", st.State, st.LeaderAddr)
		}
		return nil
	})
	for _, id := range []string{"n2", "n3"} {
		n := c.Start(id, false)
		c.WaitFor(20*time.Second, n.ID+" answers /status", func() error { _, err := n.Status(); return err })
		c.Join(n1.ClientAddr, n)
	}
	c.WaitFor(20*time.Second, "all three nodes report the same leader, members and applied index", func() error {
		sts, err := c.Converged()
		if err != nil {
			return err
		}
		if len(sts) != 3 {
			return fmt.Errorf("%d nodes answer: %s", len(sts), Describe(sts))
		}
		for id, st := range sts {
			if len(st.Members) != 3 {
				return fmt.Errorf("%s knows %d members: %s", id, len(st.Members), Describe(sts))
			}
		}
		return nil
	})

	p, err := qmq.NewProducer(c.ClientAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// Cancelled first on the way out, so that a failing test stops sending.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	msgs := make([]*qmq.Message, total)
	sent := make(map[string]int, total) // id → index
	for i := range msgs {
		m := p.GenerateMessage(subject)
		m.SetInt("seq", int64(i))
		m.SetBody([]byte("order " + strconv.Itoa(i)))
		msgs[i] = m
		sent[m.ID()] = i
	}
	if len(sent) != total {
		t.Fatalf("GenerateMessage gave %d distinct ids for %d messages", len(sent), total)
	}

	var (
		mu     sync.Mutex
		acked  = make(map[string]bool, total)
		failed = map[string]error{}

		ackedN   atomic.Int64
		half     = make(chan struct{})
		killedAt atomic.Int64 // unix nanos once the old leader is reaped
		// The first acknowledgement after the kill, and the first of a send
		// that began after it (which no dead leader can have served).
		firstAckAfterKill      atomic.Int64
		firstFreshAckAfterKill atomic.Int64
	)
	jobs := make(chan *qmq.Message)
	go func() {
		defer close(jobs)
		for _, m := range msgs {
			select {
			case jobs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	var wg sync.WaitGroup
	sendStart := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				startedAfterKill := killedAt.Load() != 0
				mctx, mcancel := context.WithTimeout(ctx, sendTimeout)
				err := p.SendMessage(mctx, m)
				mcancel()
				now := time.Now().UnixNano()
				mu.Lock()
				if err == nil {
					acked[m.ID()] = true
				} else {
					failed[m.ID()] = err
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				if k := killedAt.Load(); k != 0 && now > k {
					firstAckAfterKill.CompareAndSwap(0, now)
					if startedAfterKill {
						firstFreshAckAfterKill.CompareAndSwap(0, now)
					}
				}
				if ackedN.Add(1) == total/2 {
					close(half)
				}
			}
		}()
	}
	sendDone := make(chan struct{})
	go func() { wg.Wait(); close(sendDone) }()
	failures := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d acknowledged, %d failed%s", len(acked), len(failed), sampleErrors(failed, 3))
	}

	// Halfway: SIGKILL the leader while the senders go on.
	select {
	case <-half:
	case <-sendDone:
		t.Fatalf("sending ended before half the messages were acknowledged: %s", failures())
	case <-time.After(40 * time.Second):
		t.Fatalf("half the messages not acknowledged after 40s: %s", failures())
	}
	old, oldSt, err := c.Leader()
	if err != nil {
		t.Fatalf("finding the leader to kill: %v", err)
	}
	t.Logf("%d of %d acknowledged after %s; SIGKILL leader %s (pid %d, term %d, applied %d)",
		ackedN.Load(), total, time.Since(sendStart).Round(time.Millisecond), old.ID, old.Pid(), oldSt.Term, oldSt.AppliedIndex)
	old.Kill()
	killTime := time.Now()
	killedAt.Store(killTime.UnixNano())
	ackedAtKill := ackedN.Load()

	var newLeader *Node
	c.WaitFor(20*time.Second, "a new leader among the survivors", func() error {
		l, st, err := c.Leader()
		if err != nil {
			return err
		}
		if st.Term <= oldSt.Term {
			return fmt.Errorf("%s leads in term %d, not past the killed leader's term %d", l.ID, st.Term, oldSt.Term)
		}
		newLeader = l
		return nil
	})
	electionTime := time.Since(killTime)
	t.Logf("new leader %s seen %s after the kill", newLeader.ID, electionTime.Round(time.Millisecond))
	old.Restart()

	select {
	case <-sendDone:
	case <-time.After(2 * sendTimeout):
		t.Fatalf("sending not finished %s after the kill: %s", 2*sendTimeout, failures())
	}
	sendDuration := time.Since(sendStart)

	// Failures are acceptable only when the SDK's retries ran out.
	mu.Lock()
	ackedCount, failedCount := len(acked), len(failed)
	for id, err := range failed {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("message %s (#%d) failed before its %s of retries ran out: %v", id, sent[id], sendTimeout, err)
		}
	}
	mu.Unlock()
	t.Logf("sent %d in %s: %d acknowledged (%d of them after the kill), %d failed after retries ran out%s",
		total, sendDuration.Round(time.Millisecond), ackedCount, int64(ackedCount)-ackedAtKill, failedCount, sampleErrors(failed, 3))
	if ackedCount+failedCount != total {
		t.Fatalf("%d acknowledged + %d failed != %d sent", ackedCount, failedCount, total)
	}
	if firstAckAfterKill.Load() == 0 {
		t.Fatalf("no send succeeded after the leader was killed: %s", failures())
	}

	// Every node, the restarted one included, converges.
	var final map[string]*admin.Status
	c.WaitFor(30*time.Second, "all three nodes (the restarted one included) report the same leader and applied index", func() error {
		sts, err := c.Converged()
		if err != nil {
			return err
		}
		if len(sts) != 3 {
			return fmt.Errorf("%d nodes answer: %s", len(sts), Describe(sts))
		}
		final = sts
		return nil
	})
	t.Logf("converged: %s", Describe(final))
	for id, st := range final {
		if id != old.ID && st.AppliedIndex != final[old.ID].AppliedIndex {
			t.Errorf("restarted node %s applied %d, %s applied %d", old.ID, final[old.ID].AppliedIndex, id, st.AppliedIndex)
		}
	}

	// Consume everything as group "checker".
	pl, err := qmq.NewPuller(c.ClientAddrs(), subject, "checker", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	received := make(map[string]int, total)
	var unknown []string
	missing := ackedCount // acknowledged ids not yet received
	consumeStart := time.Now()
	deadline := consumeStart.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		got, err := pl.Pull(pctx, 1000, 500*time.Millisecond)
		pcancel()
		if err != nil {
			t.Logf("pull: %v", err)
			continue
		}
		if len(got) == 0 {
			if missing == 0 {
				break // everything acknowledged is in, and nothing more is coming
			}
			continue
		}
		for _, m := range got {
			id := m.ID()
			if _, ok := sent[id]; !ok || m.Subject() != subject {
				unknown = append(unknown, fmt.Sprintf("%s (subject %q, seq %q)", id, m.Subject(), m.String("seq")))
				continue
			}
			received[id]++
			if received[id] == 1 && acked[id] {
				missing--
			}
		}
		actx, acancel := context.WithTimeout(ctx, 10*time.Second)
		if err := pl.Ack(actx, got...); err != nil {
			t.Logf("ack of %d messages: %v (they may be redelivered)", len(got), err)
		}
		acancel()
	}
	consumeDuration := time.Since(consumeStart)

	deliveries, dups, failedButStored := 0, 0, 0
	for id, n := range received {
		deliveries += n
		dups += n - 1
		if !acked[id] {
			failedButStored++
		}
	}
	t.Logf("consumed %d deliveries of %d distinct messages in %s: %d duplicates, %d failed-but-stored",
		deliveries, len(received), consumeDuration.Round(time.Millisecond), dups, failedButStored)
	if missing > 0 {
		var lost []int
		for id := range acked {
			if received[id] == 0 {
				lost = append(lost, sent[id])
			}
		}
		sort.Ints(lost)
		t.Errorf("%d acknowledged messages never arrived; first indexes: %v", len(lost), lost[:min(len(lost), 20)])
	}
	if len(unknown) > 0 {
		t.Errorf("%d messages arrived that were never sent, e.g. %v", len(unknown), unknown[:min(len(unknown), 5)])
	}

	t.Logf("FIGURES: kill → new leader seen %s; kill → first ack %s; kill → first ack of a send begun after the kill %s; sending %s; total %s",
		electionTime.Round(time.Millisecond),
		time.Duration(firstAckAfterKill.Load()-killTime.UnixNano()).Round(time.Millisecond),
		sinceKill(firstFreshAckAfterKill.Load(), killTime),
		sendDuration.Round(time.Millisecond), time.Since(testStart).Round(time.Millisecond))
}

// sinceKill formats the time from kill to the unix-nano instant at, or
// "never".
func sinceKill(at int64, kill time.Time) string {
	if at == 0 {
		return "never"
	}
	return time.Duration(at - kill.UnixNano()).Round(time.Millisecond).String()
}

// sampleErrors formats up to n of errs, for a failure message.
func sampleErrors(errs map[string]error, n int) string {
	if len(errs) == 0 {
		return ""
	}
	s := "; e.g."
	for id, err := range errs {
		if n == 0 {
			break
		}
		n--
		s += fmt.Sprintf(" [%s: %v]", id, err)
	}
	return s
}
