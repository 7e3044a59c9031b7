package test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

// everyFaultWithin is a run long enough to apply every kind of fault (make
// ci's): one that long fails if a kind was missed.
const everyFaultWithin = 8 * time.Minute

// Chaos runs are configured from the environment, so that `make chaos`
// and `make ci` can run longer ones than `make test`:
//
//	QMQ_CHAOS_DURATION  how long faults are applied (default 40s)
//	QMQ_CHAOS_SEED      the fault schedule's seed (default: from the clock, printed)
//	QMQ_CHAOS_ONLY      comma-separated kinds of fault to draw besides leader
//	                    kills and partitions (default: every kind), to
//	                    aim a run at one
//	QMQ_CHAOS_PLAINTEXT 1: every node and client in plaintext, without
//	                    applications (default: TLS and --auth)
func chaosSettings(t *testing.T) (time.Duration, uint64) {
	return runSettings(t, "QMQ_CHAOS", 40*time.Second)
}

// chaosSecurity is the chaos run's CA and certificates: every node serves
// TLS and checks applications (--auth), and every client connects over
// TLS as an application, unless QMQ_CHAOS_PLAINTEXT is true (nil:
// plaintext, open).
func chaosSecurity(t *testing.T) *Security {
	if s := os.Getenv("QMQ_CHAOS_PLAINTEXT"); s != "" {
		plain, err := strconv.ParseBool(s)
		if err != nil {
			t.Fatalf("QMQ_CHAOS_PLAINTEXT=%q: %v", s, err)
		}
		if plain {
			return nil
		}
	}
	return NewSecurity(t).UseAuth()
}

// runSettings reads a fault run's duration and seed from the environment
// variables PREFIX_DURATION (default def) and PREFIX_SEED (default: from
// the clock).
func runSettings(t *testing.T, prefix string, def time.Duration) (time.Duration, uint64) {
	d := def
	if s := os.Getenv(prefix + "_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("%s_DURATION=%q: %v", prefix, s, err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(prefix + "_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s_SEED=%q: %v", prefix, s, err)
		}
	}
	return d, seed
}

// TestChaos runs a metaserver group and two broker groups of three
// processes each, behind proxies, over TLS (every node, and every client
// with a certificate of the run's CA) with applications checked (the
// producers and consumers work as one application), under producers
// (synchronous and asynchronous, a tenth of the messages delayed by up to
// 8 s) and consumers: two consumer groups that acknowledge everything, one
// whose handler fails a tenth of the messages once (3 deliveries at most,
// then a dead letter), one at most once, and a broadcast consumer that
// joins once sending is under way; besides, bursts of large messages build
// backlogs that a consumer group drains at most once with the SDK's
// defaults; bursts go to a consumer group whose handlers are slower than
// their share of its ack wait; and messages with ids of their own go to
// subjects routed to one broker group each, consumed by a group at the
// latest message from the start and by one that joins later. g1's nodes
// start with different seeds of the group's configuration; g2's snapshot
// every few seconds, on small disks. Chaos meanwhile kills, pauses,
// partitions and slows leaders, followers and whole groups, sets leaders'
// clocks wrong, fills disks, fails a node's checkpoint sync, lowers
// retention and kills a node right after it removed segments, restarts
// every node of a quiet group on small disks, and adds a broker group to a
// route of the ids of their own, then makes the route's first group
// unavailable. It then checks the history: nothing acknowledged lost (to
// each at-least-once group: acknowledged by its handler or a dead letter;
// to the broadcast consumer and the late group at the latest message:
// what was sent after they joined), nothing twice to an at-most-once
// group, no id of a producer's own stored in two broker groups, every
// backlog drained with no fault in flight whole, every burst worked
// through by slow handlers with no fault in flight handled once per
// message, nothing unexpected, nothing delivered early; that every broker
// group's replicas hold byte-identical logs; and that every node holds its
// group's configuration.
func TestChaos(t *testing.T) {
	d, seed := chaosSettings(t)
	sec := chaosSecurity(t)
	mode, env := "over TLS with applications checked", ""
	if sec == nil {
		mode, env = "in plaintext", "QMQ_CHAOS_PLAINTEXT=1 "
	}
	t.Logf("chaos: seed %d, duration %s, %s (reproduce: %smake chaos SEED=%d DURATION=%s)", seed, d, mode, env, seed, d)
	v := newVerdict(t, fmt.Sprintf("chaos seed %d (%smake chaos SEED=%d DURATION=%s)", seed, env, seed, d))
	meta := NewMetaGroup(t, "--election-timeout", "500ms", "--group-timeout", "4s")
	meta.UseProxies()
	meta.UseTLS(sec)
	meta.Form("", "m1", "m2", "m3")
	// Consumer sessions time out after 3 s, so that cuts and pauses reclaim
	// consumers; g2 lives on small disks that the disk-full fault fills
	// (tmpfs mounts where the machine allows), g1 on the machine's disk.
	const sessionTimeout = 3 * time.Second
	// A disk holds the group's data (about half a gigabyte after eight
	// minutes) and room to receive a snapshot of it (twice that): 3 GiB.
	const diskSize, diskFloor, diskReserve = 3 << 30, 128 << 20, 32 << 20
	var groups []*Cluster
	for _, g := range []string{"g1", "g2"} {
		flags := []string{"--meta", meta.ClientAddrs(), "--election-timeout", "500ms", "--session-timeout", sessionTimeout.String()}
		if g == "g1" {
			// g1 stays at version 1, as a group the previous release
			// formed, for the previous-build fault.
			flags = append(flags, "--initial-version", "1")
		}
		if g == "g2" {
			flags = append(flags, "--min-free-disk", fmt.Sprint(diskFloor>>20), "--disk-reserve", fmt.Sprint(diskReserve>>20))
			flags = append(flags, g2Flags...)
		}
		c := NewCluster(t, g, flags...)
		c.UseProxies()
		c.UseTLS(sec)
		if g == "g1" {
			for id, own := range g1Flags {
				c.SetNodeFlags(id, own...)
			}
		}
		if g == "g2" {
			c.UseSmallDisks(diskSize)
			c.UseSyncFaults()
		}
		c.Form(meta.ClientAddrs(), g+"a", g+"b", g+"c")
		groups = append(groups, c)
	}
	for _, c := range append([]*Cluster{meta}, groups...) {
		servesTLS(t, c, sec != nil)
	}
	// g1's nodes were started with different seeds of the group's
	// configuration: the first leader's (g1a's) is the group's, on every
	// node; g2's nodes all seed a 2-minute dedup window and 8 MiB segments.
	sameConfig(t, groups[0], g1Config)
	sameConfig(t, groups[1], g2Config)
	t.Logf("chaos: g2's small disks are %s", map[bool]string{true: "tmpfs mounts", false: "fault injection (--disk-free-file)"}[groups[1].SmallDisksReal()])
	servers := meta.ClientAddrs()
	h := NewHistory()
	subjects := []string{"orders", "payments", "refunds", "invoices"}
	// billing and audit acknowledge everything; retrying fails a tenth of
	// the messages on their first delivery, and gives up on a message
	// after 3 deliveries (a dead letter); once consumes at most once; the
	// broadcast consumer of tail joins once sending is under way. Each
	// consumes the four subjects; bulk-once drains backlogs of large
	// messages of its own subject at most once (chaos_bulk.go).
	// ledger consumes the ledger subjects from the start, latecomer joins
	// them once sending is under way (both at the latest message:
	// chaos_ledger_test.go); slow's handlers are slower than their share
	// of its ack wait (chaos_slow_test.go).
	e := Expectations{AtLeastOnce: []string{"billing", "audit", retryingGroup, ledgerGroup, slowGroup}, AtMostOnce: []string{"once", bulkGroup},
		Broadcast: []string{broadcastGroup}, Latest: []string{latecomerGroup},
		Subjects: map[string][]string{bulkGroup: {bulkSubject}, ledgerGroup: ledgerSubjects, latecomerGroup: ledgerSubjects, slowGroup: {slowSubject}}}
	for _, g := range []string{"billing", "audit", retryingGroup, "once", broadcastGroup} {
		e.Subjects[g] = subjects
	}
	// Producers and consumers connect as an application that may send to
	// and consume the run's subjects (with the client certificate), the
	// admin.Client as the operator (a node certificate).
	adm, err := admin.New(servers, sec.OperatorConnOption())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if sec != nil {
		spec := admin.AppSpec{Code: "chaos", Send: slices.Concat(subjects, []string{bulkSubject, slowSubject}, ledgerSubjects)}
		for _, s := range spec.Send {
			spec.Consume = append(spec.Consume, admin.ConsumeGrant{Subject: s, ConsumerGroup: "*"})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sec.CreateApp(ctx, adm, spec)
		cancel()
	}
	conn := sec.ConnOption()
	setUpRetryingGroup(t, meta, adm, subjects)
	setUpGroup(t, meta, adm, bulkSubject, bulkGroup, admin.ConsumerGroupChanges{Start: transport.StartEarliest})
	ackWait := slowAckWait
	setUpGroup(t, meta, adm, slowSubject, slowGroup, admin.ConsumerGroupChanges{AckWait: &ackWait, Start: transport.StartEarliest})
	narrow := narrowRoutes(t, adm, groups)
	// A consumer group that never consumes: retention removes what it has
	// not read, and every replica must move its cursor alike (the replica
	// comparison compares the backlog each node counts). It is owed nothing.
	setUpGroup(t, meta, adm, subjects[0], laggardGroup, admin.ConsumerGroupChanges{Start: transport.StartEarliest})

	ch := NewChaos(t, seed, meta, groups...)
	if only := os.Getenv("QMQ_CHAOS_ONLY"); only != "" {
		ch.Only = strings.Split(only, ",")
	}
	ch.SessionTimeout = sessionTimeout
	ch.DiskGroup, ch.DiskFloor, ch.DiskReserve = groups[1], diskFloor, diskReserve
	ch.SyncFaultGroup, ch.QuietGroup = groups[1], groups[1]
	ch.V1Group = groups[0]
	ch.PreviousQmqd, _ = PreviousRelease(t)
	ch.Narrow = narrow
	// The retention fault waits until nothing handed to a producer before
	// its time is owed to any consumer group, reading the dead letters
	// (at most once a second) as it waits.
	var deadRead time.Time
	ch.Owed = func(before time.Time) error {
		if time.Since(deadRead) > time.Second {
			deadRead = time.Now()
			readDeadLetters(t, h, adm, subjects, retryingGroup, false)
		}
		if n, pending := h.UndeliveredBefore(e, before); n+pending > 0 {
			return fmt.Errorf("%d acknowledged sends not delivered everywhere, %d with no outcome yet", n, pending)
		}
		return nil
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: FAILED with seed %d (make chaos SEED=%d DURATION=%s); faults so far:\n%s",
				seed, seed, d, strings.Join(ch.Schedule, "\n"))
		}
	})

	var subs []*qmq.Subscription
	var subsMu sync.Mutex
	subscribe := func(subject, group string, h qmq.Handler, opts ...qmq.SubscribeOption) *qmq.Subscription {
		opts = append([]qmq.SubscribeOption{conn, qmq.WithPullWait(500 * time.Millisecond), qmq.WithWorkers(2), qmq.StartAt(qmq.Earliest),
			qmq.WithLogger(nil)}, opts...)
		sub, err := qmq.Subscribe(servers, subject, group, h, opts...)
		if err != nil {
			t.Error(err)
			return nil
		}
		subsMu.Lock()
		subs = append(subs, sub)
		subsMu.Unlock()
		return sub
	}
	for _, s := range subjects {
		for _, g := range []string{"billing", "audit"} {
			subscribe(s, g, func(_ context.Context, m *qmq.Message) error {
				h.Delivered(g, m, time.Now())
				return nil
			})
		}
		subscribe(s, retryingGroup, func(_ context.Context, m *qmq.Message) error {
			if failsOnce(m.ID()) && m.Deliveries() == 1 {
				h.Nacked(retryingGroup, m, time.Now())
				return fmt.Errorf("failing message %s once", m.ID())
			}
			h.Delivered(retryingGroup, m, time.Now())
			return nil
		})
		subscribe(s, "once", func(_ context.Context, m *qmq.Message) error {
			h.Delivered("once", m, time.Now())
			return nil
		}, qmq.WithAtMostOnce())
	}
	for _, s := range ledgerSubjects {
		subscribe(s, ledgerGroup, func(_ context.Context, m *qmq.Message) error {
			h.Delivered(ledgerGroup, m, time.Now())
			return nil
		}, qmq.StartAt(qmq.Latest))
	}
	subscribe(slowSubject, slowGroup, slowHandlerOf(h))
	if t.Failed() {
		t.FailNow()
	}
	closeSubs := func() {
		subsMu.Lock()
		defer subsMu.Unlock()
		for _, s := range subs {
			s.Close()
		}
	}
	defer closeSubs()

	stop := make(chan struct{})
	var senders sync.WaitGroup
	// Four synchronous producers and one with 100 sends in flight; of the
	// ledger's (ids of their own), one of each, with 20 in flight.
	var producers []producer
	for i := range 5 {
		w := producer{subjects: subjects, seed: seed + uint64(i), timeout: 20 * time.Second}
		if i == 0 {
			w.window = 100
		}
		producers = append(producers, w)
	}
	for i := range 2 {
		producers = append(producers, producer{subjects: ledgerSubjects, seed: seed + 50 + uint64(i), window: 20 * i, timeout: ledgerTimeout, ownIDs: true})
	}
	for _, w := range producers {
		senders.Add(1)
		go func() {
			defer senders.Done()
			send(t, h, servers, conn, w, stop)
		}()
	}
	senders.Add(3)
	go func() {
		defer senders.Done()
		sendAtLimits(t, h, servers, conn, subjects, uint64(seed)+99, stop)
	}()
	go func() {
		defer senders.Done()
		drainBacklogs(t, h, ch, adm, servers, conn, uint64(seed)+98, stop)
	}()
	go func() {
		defer senders.Done()
		paceBursts(t, h, ch, adm, servers, conn, uint64(seed)+97, stop)
	}()
	// The broadcast consumer joins once the first thousand sends are
	// acknowledged; its group is named after it.
	var joining sync.WaitGroup
	joining.Add(2)
	go func() {
		defer joining.Done()
		joinLatecomer(t, h, ch, subscribe)
	}()
	go func() {
		defer joining.Done()
		if err := Poll(2*time.Minute, func() error {
			if n := h.AckedCount(); n < 1000 {
				return fmt.Errorf("%d sends acknowledged", n)
			}
			return nil
		}); err != nil {
			t.Errorf("broadcast consumer: %v", err)
			return
		}
		for _, s := range subjects {
			sub := subscribe(s, "tail", func(_ context.Context, m *qmq.Message) error {
				h.Delivered(broadcastGroup, m, time.Now())
				return nil
			}, qmq.WithBroadcast(0), qmq.WithConsumerName("watcher"), qmq.StartAt(qmq.Latest))
			if sub == nil {
				return
			}
			if sub.Group() != broadcastGroup {
				t.Errorf("the broadcast consumer consumes as %q, want %q", sub.Group(), broadcastGroup)
				return
			}
			joinBroadcast(t, h, adm, s, broadcastGroup)
		}
	}()

	ch.Run(d)
	close(stop)
	senders.Wait()
	joining.Wait()

	// Lost messages never arrive: after two minutes the checker says which.
	// The dead letters count as arrived for the group that keeps them.
	lastDead := time.Time{}
	err = Poll(2*time.Minute, func() error {
		if time.Since(lastDead) > 2*time.Second {
			lastDead = time.Now()
			readDeadLetters(t, h, adm, subjects, retryingGroup, false)
		}
		if n := h.Undelivered(e); n > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered everywhere", n)
		}
		return nil
	})
	if err != nil {
		v.Logf("chaos: after waiting two minutes: %v", err)
	}
	closeSubs()
	readDeadLetters(t, h, adm, subjects, retryingGroup, true)
	report := h.Check(e)
	t.Logf("chaos: seed %d: %s", seed, ch.Summary())
	t.Logf("chaos: fault schedule:\n%s", strings.Join(ch.Schedule, "\n"))
	t.Logf("chaos: history: %s", report)
	if !report.OK() {
		explain(v, h, adm, report)
		v.Fatalf("chaos seed %d broke a promise: %s", seed, report)
	}
	if report.Acked < 1000 {
		v.Fatalf("only %d messages acknowledged: the run proves little", report.Acked)
	}
	if report.CleanBursts[bulkGroup] == 0 {
		v.Fatalf("no backlog of %s drained with no fault in flight: the run proves nothing of at most once under a full reply", bulkSubject)
	}
	// Every other fault is a leader kill; the slowest kinds (restarting a
	// whole quiet group, waiting for retention) take half a minute or more,
	// so eight minutes hold 34 to 40 of them here: one each 20 s is the floor.
	if want := int(d / (20 * time.Second)); ch.Counts["kill-leader"] < want {
		v.Fatalf("%d leader kills in %s, want at least %d", ch.Counts["kill-leader"], d, want)
	}
	if want := int(d / time.Minute); ch.Counts["partition"] < want {
		v.Fatalf("%d partitions in %s, want at least %d", ch.Counts["partition"], d, want)
	}
	if d >= everyFaultWithin && ch.Only == nil {
		for _, f := range otherFaults {
			if ch.Counts[f.name] == 0 {
				v.Fatalf("no %s fault in %s (every kind is applied once before any repeats)", f.name, d)
			}
		}
	}
	for _, c := range groups {
		c.SameReplicas(3 * time.Minute)
	}
	sameConfig(t, groups[0], g1Config)
	sameConfig(t, groups[1], g2Config)
}

// g1Flags start g1's nodes with different seeds of the broker group's
// configuration, every one valid: only the first leader's (g1a's, which
// bootstraps the group) becomes the group's, and the others' nodes log
// that they differ and follow it. A node that applied by its own flags
// would cut other segments, hand out other pulls and remove other data,
// and the replica comparison would fail. The group's values keep the
// history's checks meaningful: retention a day (the retention fault
// lowers it for a moment, on its rules), a dedup window of 2 minutes
// (longer than any producer retries a send: the at-limit producer gives
// up after 60 s), 8 MiB segments, so retention has sealed segments to
// remove. Sizes in MiB, index segments in KiB.
var g1Flags = map[string][]string{
	"g1a": {"--retention-age", "24h", "--dedup-window", "2m", "--max-pull", "500", "--max-unacked", "5000",
		"--segment-size", "8", "--index-segment-size", "1024"},
	"g1b": {"--retention-age", "168h", "--retention-size", "4096", "--dedup-window", "5m", "--max-pull", "1000",
		"--max-unacked", "10000", "--segment-size", "32", "--index-segment-size", "4096"},
	"g1c": {"--retention-age", "12h", "--retention-size", "2048", "--dedup-window", "10m", "--max-pull", "2000",
		"--max-unacked", "20000", "--segment-size", "4", "--index-segment-size", "256"},
}

// g1Config is g1's configuration: g1a's seed.
var g1Config = transport.BrokerConfig{RetentionAge: 24 * time.Hour, DedupWindow: 2 * time.Minute, MaxPull: 500, MaxUnacked: 5000,
	SegmentSize: 8 << 20, IndexSegmentSize: 1 << 20, Source: "broker-group"}

// g2Flags are flags of every g2 node: a 2-minute dedup window and 8 MiB
// segments (as g1's, for the retention fault), and a snapshot, which is
// a checkpoint, every 5–10 s whatever came since, for the sync fault and
// the quiet restart.
var g2Flags = []string{"--dedup-window", "2m", "--segment-size", "8", "--snapshot-interval", "5s", "--snapshot-threshold", "1"}

// g2Config is g2's configuration: its flags' seed, the rest defaults.
var g2Config = transport.BrokerConfig{RetentionAge: 7 * 24 * time.Hour, DedupWindow: 2 * time.Minute, MaxPull: 1000, MaxUnacked: 10000,
	SegmentSize: 8 << 20, IndexSegmentSize: 4 << 20, Source: "broker-group"}

// sameConfig fails the test unless every node of c shows want as its
// group's configuration (the entry that set it aside: it differs as the
// configuration changes).
func sameConfig(t *testing.T, c *Cluster, want transport.BrokerConfig) {
	t.Helper()
	c.WaitFor(30*time.Second, c.Group+": every node holds the group's configuration", func() error {
		for _, n := range c.Nodes() {
			st, err := n.Status()
			if err != nil {
				return err
			}
			if st.BrokerConfig == nil {
				return fmt.Errorf("%s shows no configuration", n.ID)
			}
			got := *st.BrokerConfig
			got.Index = 0
			if got != want {
				return fmt.Errorf("%s holds %+v, want %+v", n.ID, got, want)
			}
		}
		return nil
	})
}

// servesTLS fails the test unless every node of c says in its /status
// that it serves TLS, or (!on) that it does not.
func servesTLS(t *testing.T, c *Cluster, on bool) {
	t.Helper()
	sts, err := c.Statuses()
	if err != nil {
		t.Fatal(err)
	}
	for id, st := range sts {
		if st.TLS != on {
			t.Fatalf("%s: %s serves TLS: %t, want %t", c.Group, id, st.TLS, on)
		}
	}
}

// retryingGroup is the chaos run's consumer group whose handler fails a
// tenth of the messages once each.
const retryingGroup = "retrying"

// laggardGroup is the chaos run's consumer group that never consumes.
const laggardGroup = "laggard"

// broadcastGroup is the group of its own of the chaos run's broadcast
// consumer: consumer "watcher" of group "tail".
const broadcastGroup = "tail.watcher"

// failsOnce says whether the retrying group's handler fails message id on
// its first delivery: a tenth of the ids, by hash.
func failsOnce(id string) bool {
	f := fnv.New32a()
	f.Write([]byte(id))
	return f.Sum32()%10 == 0
}

// setUpRetryingGroup creates the retrying group of every subject before
// anything is sent: at the earliest message, 3 deliveries at most, the
// first retry after 1 s and the next after 2 s.
func setUpRetryingGroup(t *testing.T, meta *Cluster, adm *admin.Client, subjects []string) {
	maxDeliveries, first, most := uint32(3), time.Second, 2*time.Second
	for _, s := range subjects {
		setUpGroup(t, meta, adm, s, retryingGroup, admin.ConsumerGroupChanges{MaxDeliveries: &maxDeliveries,
			RetryFirst: &first, RetryMax: &most, Start: transport.StartEarliest})
	}
}

// setUpGroup creates consumer group group of subject with the admin, as
// changes says, before anything is sent.
func setUpGroup(t *testing.T, meta *Cluster, adm *admin.Client, subject, group string, changes admin.ConsumerGroupChanges) {
	meta.WaitFor(30*time.Second, "consumer group "+group+" of "+subject+" set up", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := adm.SetConsumerGroup(ctx, subject, group, changes)
		return err
	})
}

// joinBroadcast waits until broadcast group exists in every broker group
// of subject (its first pulls created it there), and records that moment
// as its join: what is sent from then on must reach it.
func joinBroadcast(t *testing.T, h *History, adm *admin.Client, subject, group string) {
	err := Poll(2*time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := adm.Route(ctx, subject)
		if err != nil {
			return err
		}
		v, err := adm.ConsumerGroup(ctx, subject, group)
		if err != nil {
			return err
		}
		if len(v.BrokerGroups) < len(r.BrokerGroups) {
			return fmt.Errorf("in %d of the %d broker groups of %s", len(v.BrokerGroups), len(r.BrokerGroups), subject)
		}
		return nil
	})
	if err != nil {
		t.Errorf("broadcast group %s never joined %s: %v", group, subject, err)
		return
	}
	h.Joined(group, subject, time.Now())
	t.Logf("chaos: broadcast group %s joined %s", group, subject)
}

// readDeadLetters records group's dead letters of every subject in h; with
// final, a failure to read them fails the test.
func readDeadLetters(t *testing.T, h *History, adm *admin.Client, subjects []string, group string, final bool) {
	for _, s := range subjects {
		for offset := 0; ; offset += 1000 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			pages, err := adm.DeadLetters(ctx, s, group, offset, 1000)
			cancel()
			if err != nil {
				if final {
					t.Errorf("reading the dead letters of %s of %s: %v", group, s, err)
				}
				break
			}
			more := false
			for _, p := range pages {
				ids := make([]string, 0, len(p.Letters))
				for _, d := range p.Letters {
					if !d.Removed {
						ids = append(ids, d.ID)
					}
				}
				h.DeadLetters(group, ids)
				more = more || p.Total > offset+len(p.Letters)
			}
			if !more {
				break
			}
		}
	}
}

// producer is one of the chaos run's producers: what it sends, and how.
type producer struct {
	subjects []string
	seed     uint64
	// window is how many asynchronous sends it keeps in flight; 0: one
	// synchronous send at a time.
	window  int
	timeout time.Duration // of each send
	// ownIDs gives each message an id of its own (Message.SetID), sent
	// once: the checker fails a run that stores one in two broker groups.
	ownIDs bool
}

// send sends messages to w's subjects until stop, a tenth of them delayed
// by up to 8 s, connecting with conn. After a failed send it pauses
// 200 ms (a subject whose only broker group is drained refuses at once).
func send(t *testing.T, h *History, servers string, conn qmq.ConnOption, w producer, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, conn, qmq.WithSendTimeout(w.timeout))
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(w.seed, 7))
	window := make(chan struct{}, max(w.window, 1))
	var inflight sync.WaitGroup
	defer inflight.Wait()
	sent := func(m *qmq.Message, err error) {
		h.Sent(m, err)
		if err != nil {
			sleepFor(200 * time.Millisecond)
		}
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		m := p.GenerateMessage(w.subjects[rng.IntN(len(w.subjects))])
		m.SetBody([]byte(fmt.Sprintf("message %d", i)))
		if rng.IntN(10) == 0 {
			m.SetDelay(time.Duration(1+rng.IntN(8000)) * time.Millisecond)
		}
		if w.ownIDs {
			if err := m.SetID(fmt.Sprintf("entry-%d-%d", w.seed, i)); err != nil {
				t.Error(err)
				return
			}
			h.SendingChosen(m)
		} else {
			h.Sending(m)
		}
		if w.window == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
			err := p.SendMessage(ctx, m)
			cancel()
			sent(m, err)
			continue
		}
		window <- struct{}{}
		inflight.Add(1)
		p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
			sent(m, err)
			<-window
			inflight.Done()
		}))
	}
}

// sendAtLimits sends, every 15–30 s until stop, a message of exactly the
// largest size a message may have (qmq.MaxMessageSize), immediate or
// delayed, which must be delivered like any other; and one a byte larger,
// which the SDK must refuse with ErrMessageTooLarge before it is sent.
// The producer connects with conn.
func sendAtLimits(t *testing.T, h *History, servers string, conn qmq.ConnOption, subjects []string, seed uint64, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, conn, qmq.WithSendTimeout(60*time.Second))
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 11))
	for {
		timer := time.NewTimer(time.Duration(15000+rng.IntN(15000)) * time.Millisecond)
		select {
		case <-stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		subject := subjects[rng.IntN(len(subjects))]
		big := p.GenerateMessage(subject)
		if rng.IntN(3) == 0 {
			big.SetDelay(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
		}
		shapeTo(big, qmq.MaxMessageSize)
		h.Sending(big)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		h.Sent(big, p.SendMessage(ctx, big))
		over := p.GenerateMessage(subject)
		shapeTo(over, qmq.MaxMessageSize+1)
		if err := p.SendMessage(ctx, over); !errors.Is(err, qmq.ErrMessageTooLarge) {
			t.Errorf("a message one byte over the limit: %v, want ErrMessageTooLarge", err)
		}
		cancel()
	}
}

// shapeTo gives m a body and properties that make its encoding size bytes.
func shapeTo(m *qmq.Message, size int) {
	at := int64(0)
	if d := m.DeliverAt(); !d.IsZero() {
		at = d.UnixMilli()
	}
	shape := testmsg.OfSize(m.ID(), m.Subject(), at, size)
	m.SetBody(shape.Body)
	for _, p := range shape.Properties {
		m.SetString(p.Key, p.Value)
	}
}
