package test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// workload sends to many subjects from several goroutines and consumes
// every subject as one consumer group, recording what was acknowledged and
// what arrived.
type workload struct {
	t        *testing.T
	p        *qmq.Producer
	servers  string
	mu       sync.Mutex
	sent     map[string]bool // every id handed to the producer
	acked    map[string]bool
	received map[string]int
	ackedN   atomic.Int64
	subs     []*qmq.Subscription
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newWorkload(t *testing.T, servers string) *workload {
	p, err := qmq.NewProducer(servers)
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{t: t, p: p, servers: servers, sent: map[string]bool{}, acked: map[string]bool{},
		received: map[string]int{}, stop: make(chan struct{})}
	t.Cleanup(func() {
		w.stopSending()
		for _, s := range w.subs {
			s.Close()
		}
		p.Close()
	})
	return w
}

// consume subscribes to subject as consumer group "checker".
func (w *workload) consume(subject string) {
	s, err := qmq.Subscribe(w.servers, subject, "checker", func(_ context.Context, m *qmq.Message) error {
		w.mu.Lock()
		w.received[m.ID()]++
		w.mu.Unlock()
		return nil
	}, qmq.WithPullWait(500*time.Millisecond), qmq.StartAt(qmq.Earliest))
	if err != nil {
		w.t.Fatal(err)
	}
	w.subs = append(w.subs, s)
}

// send sends one message synchronously and records the outcome.
func (w *workload) send(ctx context.Context, subject string) error {
	m := w.p.GenerateMessage(subject)
	m.SetBody([]byte("payload of " + subject))
	w.mu.Lock()
	w.sent[m.ID()] = true
	w.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := w.p.SendMessage(sctx, m)
	if err == nil {
		w.mu.Lock()
		w.acked[m.ID()] = true
		w.mu.Unlock()
		w.ackedN.Add(1)
	}
	return err
}

// sendLoop sends to subjects in turn from n goroutines until stopSending.
func (w *workload) sendLoop(n int, subjects []string) {
	for g := range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for i := g; ; i += n {
				select {
				case <-w.stop:
					return
				default:
				}
				if err := w.send(context.Background(), subjects[i%len(subjects)]); err != nil {
					w.t.Logf("send failed after retries: %v", err)
				}
			}
		}()
	}
}

func (w *workload) stopSending() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// awaitAcked waits until n more sends than now are acknowledged.
func (w *workload) awaitAcked(c *Cluster, n int64, what string) {
	target := w.ackedN.Load() + n
	c.WaitFor(60*time.Second, fmt.Sprintf("%d more sends acknowledged %s", n, what), func() error {
		if got := w.ackedN.Load(); got < target {
			return fmt.Errorf("%d of %d acknowledged", got, target)
		}
		return nil
	})
}

// check returns the acknowledged ids not received yet, and the received
// ids never sent.
func (w *workload) check() (missing, unexpected []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id := range w.acked {
		if w.received[id] == 0 {
			missing = append(missing, id)
		}
	}
	for id := range w.received {
		if !w.sent[id] {
			unexpected = append(unexpected, id)
		}
	}
	return missing, unexpected
}

// killLeader SIGKILLs the group's leader, waits for a successor in a later
// term, and restarts the killed node.
func killLeader(c *Cluster) {
	old, st, err := c.Leader()
	if err != nil {
		c.t.Fatalf("%s: finding the leader: %v", c.Group, err)
	}
	c.t.Logf("%s: SIGKILL leader %s (term %d)", c.Group, old.ID, st.Term)
	old.Kill()
	c.WaitFor(20*time.Second, c.Group+": a new leader", func() error {
		l, lst, err := c.Leader()
		if err != nil {
			return err
		}
		if lst.Term <= st.Term {
			return fmt.Errorf("%s leads in term %d, not past %d", l.ID, lst.Term, st.Term)
		}
		return nil
	})
	old.Restart()
}

// TestNineProcessCluster builds a metaserver group and two broker groups of
// three processes each with qmqctl join alone, runs producers and consumers
// over 20 subjects while the metaserver leader and a broker-group leader
// are SIGKILLed, adds a third broker group that takes new subjects, drains
// a group, and checks that every acknowledged message is consumed and the
// drained group ends empty.
func TestNineProcessCluster(t *testing.T) {
	meta := NewMetaGroup(t, "--election-timeout", "500ms", "--group-timeout", "3s")
	meta.Form("", "m1", "m2", "m3")
	metaAddrs := meta.ClientAddrs()
	brokerFlags := []string{"--meta", metaAddrs, "--election-timeout", "500ms", "--session-timeout", "5s"}
	// Every cluster is made before the workload, so that at cleanup the
	// clients stop before the processes they talk to.
	groups := map[string]*Cluster{}
	for _, g := range []string{"g1", "g2", "g3"} {
		groups[g] = NewCluster(t, g, brokerFlags...)
	}
	for _, g := range []string{"g1", "g2"} {
		groups[g].Form(metaAddrs, g+"a", g+"b", g+"c")
	}
	adm, err := admin.New(metaAddrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	meta.WaitFor(20*time.Second, "the metaserver sees g1 and g2 available", availability(adm, true, "g1", "g2"))

	var subjects []string
	for i := range 20 {
		subjects = append(subjects, fmt.Sprintf("s%02d", i))
	}
	w := newWorkload(t, metaAddrs)
	for _, s := range subjects {
		w.consume(s)
	}
	w.sendLoop(8, subjects)
	w.awaitAcked(meta, 2000, "before any fault")

	killLeader(meta)
	w.awaitAcked(meta, 1000, "after the metaserver leader was killed")
	killLeader(groups["g1"])
	w.awaitAcked(meta, 1000, "after g1's leader was killed")

	// A third group added at run time takes new subjects: it holds none.
	groups["g3"].Form(metaAddrs, "g3a", "g3b", "g3c")
	meta.WaitFor(20*time.Second, "the metaserver sees g3 available", availability(adm, true, "g3"))
	var fresh []string
	for i := range 4 {
		s := fmt.Sprintf("new%02d", i)
		// The first send to a subject assigns it.
		if err := w.send(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := adm.Route(ctx, s)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(r.BrokerGroups, func(g admin.BrokerGroupRoute) bool { return g.Name == "g3" }) {
			t.Fatalf("new subject %s routed to %+v, not to the new, empty g3", s, r.BrokerGroups)
		}
		fresh = append(fresh, s)
		w.consume(s)
	}
	w.sendLoop(2, fresh)

	// Drain g2: sends move to the subjects' other groups.
	if out, err := meta.Ctl("--server", metaAddrs, "broker-group", "readonly", "g2"); err != nil {
		t.Fatal(err)
	} else {
		t.Log(strings.TrimSpace(out))
	}
	g2 := groups["g2"]
	meta.WaitFor(20*time.Second, "g2's leader to know it is drained", func() error {
		_, st, err := g2.Leader()
		if err != nil {
			return err
		}
		if !st.ReadOnly {
			return fmt.Errorf("%s is not readonly yet", st.ID)
		}
		return nil
	})
	w.awaitAcked(meta, 1000, "after g2 was drained")
	w.stopSending()

	meta.WaitFor(60*time.Second, "every acknowledged message to be consumed", func() error {
		missing, _ := w.check()
		if len(missing) > 0 {
			return fmt.Errorf("%d acknowledged messages not consumed yet, e.g. %s", len(missing), missing[0])
		}
		return nil
	})
	if _, unexpected := w.check(); len(unexpected) > 0 {
		t.Fatalf("%d messages consumed that were never sent, e.g. %s", len(unexpected), unexpected[0])
	}
	meta.WaitFor(30*time.Second, "the drained g2 to end empty", func() error {
		_, st, err := g2.Leader()
		if err != nil {
			return err
		}
		if st.Backlog != 0 {
			return fmt.Errorf("%s: backlog %d", st.ID, st.Backlog)
		}
		return nil
	})

	// A node is stopped and removed from its group; the metaserver forgets it.
	groups["g3"].Node("g3c").Kill()
	if _, err := meta.Ctl("--server", metaAddrs, "leave", "--yes", "--broker-group", "g3", "--id", "g3c"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := adm.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range cl.BrokerGroups {
		if g.Name == "g3" && len(g.Nodes) != 2 {
			t.Errorf("g3 has %d registered nodes after g3c left, want 2", len(g.Nodes))
		}
	}

	out, err := meta.Ctl("--server", metaAddrs, "status")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("qmqctl status:\n%s", out)
	for _, want := range []string{"meta", "g1", "g2 (readonly)", "g3", "3 broker groups"} {
		if !strings.Contains(out, want) {
			t.Errorf("qmqctl status lacks %q", want)
		}
	}
	w.mu.Lock()
	t.Logf("FIGURES: %d sent, %d acknowledged, %d distinct consumed", len(w.sent), len(w.acked), len(w.received))
	w.mu.Unlock()
}
