package test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

// TestChaosAcrossHosts is the chaos run on hosts of their own: a
// metaserver group and two broker groups of three nodes each, nine
// network namespaces (test/netns), each link with a round trip of 1–5 ms
// of its own, a jitter of a tenth of it with reordering, and 0.5 % loss;
// the test process, whose producers and consumers connect through the
// metaserver, is a host of that network too. Meanwhile faults: leaders
// and followers killed, one host cut off, a leader's host cut off, a
// group split 1|2 (chaos_hosts.go). It then checks the history (nothing
// acknowledged lost, nothing unexpected, nothing delivered early, every
// acknowledged message delivered to both consumer groups within two
// minutes, so no consumer is stuck) and that every broker group's replicas
// hold byte-identical logs.
//
//	QMQ_CHAOS_HOSTS_DURATION  how long faults are applied (default 40s; make ci: CHAOS_HOSTS_CI)
//	QMQ_CHAOS_HOSTS_SEED      the schedule's and the links' seed (default: from the clock)
//	QMQ_HOSTS=off             skip (saying so) where namespaces cannot be made; without
//	                          it the test fails there
func TestChaosAcrossHosts(t *testing.T) {
	d, seed := runSettings(t, "QMQ_CHAOS_HOSTS", 40*time.Second)
	t.Logf("chaos across hosts: seed %d, duration %s (reproduce: QMQ_CHAOS_HOSTS_SEED=%d QMQ_CHAOS_HOSTS_DURATION=%s go test ./test -run '^TestChaosAcrossHosts$')", seed, d, seed, d)
	v := newVerdict(t, fmt.Sprintf("chaos across hosts, seed %d (QMQ_CHAOS_HOSTS_SEED=%d QMQ_CHAOS_HOSTS_DURATION=%s)", seed, seed, d))
	net := newHostNetwork(t, seed)
	const sessionTimeout = 3 * time.Second
	meta := NewMetaGroup(t, "--election-timeout", "500ms", "--group-timeout", "4s")
	meta.UseHosts(net)
	// The hosts are made as the groups start: the links are set per pair
	// once all nine exist, and meanwhile default to the slowest.
	net.SetLinks(linkOfRTT(5*time.Millisecond, 0.005))
	meta.Form("", "m1", "m2", "m3")
	var groups []*Cluster
	for _, g := range []string{"g1", "g2"} {
		c := NewCluster(t, g, "--meta", meta.ClientAddrs(), "--election-timeout", "500ms", "--session-timeout", sessionTimeout.String())
		c.UseHosts(net)
		c.Form(meta.ClientAddrs(), g+"a", g+"b", g+"c")
		groups = append(groups, c)
	}
	SetHostLinks(net, seed, time.Millisecond, 5*time.Millisecond, 0.005)
	servers := meta.ClientAddrs()
	h := NewHistory()
	subjects := []string{"orders", "payments", "refunds", "invoices"}
	e := Expectations{AtLeastOnce: []string{"billing", "audit"}, AtMostOnce: []string{"once"}}
	ch := NewChaos(t, seed, meta, groups...)
	ch.SessionTimeout = sessionTimeout
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos across hosts: FAILED with seed %d; faults so far:\n%s", seed, strings.Join(ch.Schedule, "\n"))
		}
	})

	var subs []*qmq.Subscription
	for _, s := range subjects {
		for _, g := range []string{"billing", "audit", "once"} {
			opts := []qmq.SubscribeOption{qmq.WithPullWait(500 * time.Millisecond), qmq.WithWorkers(2), qmq.StartAt(qmq.Earliest), qmq.WithLogger(nil)}
			if g == "once" {
				opts = append(opts, qmq.WithAtMostOnce())
			}
			sub, err := qmq.Subscribe(servers, s, g, func(_ context.Context, m *qmq.Message) error {
				h.Delivered(g, m, time.Now())
				return nil
			}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
	}
	closeSubs := sync.OnceFunc(func() {
		for _, s := range subs {
			s.Close()
		}
	})
	defer closeSubs()

	stop := make(chan struct{})
	var senders sync.WaitGroup
	// Three synchronous producers and one with 100 sends in flight.
	for i := range 4 {
		w := producer{subjects: subjects, seed: seed + uint64(i), timeout: 20 * time.Second}
		if i == 0 {
			w.window = 100
		}
		senders.Add(1)
		go func() {
			defer senders.Done()
			send(t, h, servers, qmq.ConnOption{}, w, stop)
		}()
	}
	ch.RunHosts(d, net)
	close(stop)
	senders.Wait()

	err := Poll(2*time.Minute, func() error {
		if n := h.Undelivered(e); n > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered everywhere", n)
		}
		return nil
	})
	if err != nil {
		v.Logf("chaos across hosts: after waiting two minutes: %v", err)
	}
	closeSubs()
	report := h.Check(e)
	st := net.Switch().Stats()
	t.Logf("chaos across hosts: seed %d: %s", seed, ch.Summary())
	t.Logf("chaos across hosts: fault schedule:\n%s", strings.Join(ch.Schedule, "\n"))
	t.Logf("chaos across hosts: history: %s", report)
	t.Logf("chaos across hosts: the switch forwarded %d packets, lost %d, dropped %d at cut links", st.Forwarded, st.Lost, st.Cut)
	if !report.OK() {
		if adm, err := admin.New(servers); err == nil {
			explain(v, h, adm, report)
			adm.Close()
		}
		v.Fatalf("chaos across hosts, seed %d, broke a promise: %s", seed, report)
	}
	if report.Acked < 500 {
		v.Fatalf("only %d messages acknowledged: the run proves little", report.Acked)
	}
	if st.Lost == 0 || st.Cut == 0 {
		v.Fatalf("the switch lost %d packets and cut %d: the run did not cross the lossy network it claims", st.Lost, st.Cut)
	}
	for _, f := range hostFaults {
		if d >= time.Duration(len(hostFaults))*15*time.Second && ch.Counts[f.name] == 0 {
			v.Fatalf("no %s fault in %s (every kind is applied once per round)", f.name, d)
		}
	}
	for _, c := range groups {
		c.SameReplicas(3 * time.Minute)
	}
}
