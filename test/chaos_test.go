package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/testmsg"
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
func chaosSettings(t *testing.T) (time.Duration, uint64) {
	d := 40 * time.Second
	if s := os.Getenv("QMQ_CHAOS_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("QMQ_CHAOS_DURATION=%q: %v", s, err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("QMQ_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("QMQ_CHAOS_SEED=%q: %v", s, err)
		}
	}
	return d, seed
}

// TestChaos runs a metaserver group and two broker groups of three
// processes each, behind proxies, under producers (synchronous and
// asynchronous, a tenth of the messages delayed by up to 8 s) and two
// consumer groups, while Chaos kills, pauses, partitions and slows leaders,
// followers and whole groups, and sets leaders' clocks wrong. It then checks the
// history: nothing acknowledged lost, nothing unexpected, nothing delivered
// early; and that every broker group's replicas hold byte-identical logs.
func TestChaos(t *testing.T) {
	d, seed := chaosSettings(t)
	t.Logf("chaos: seed %d, duration %s (reproduce: make chaos SEED=%d DURATION=%s)", seed, d, seed, d)
	meta := NewMetaGroup(t, "--election-timeout", "500ms", "--group-timeout", "4s")
	meta.UseProxies()
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
		if g == "g2" {
			flags = append(flags, "--min-free-disk", fmt.Sprint(diskFloor>>20), "--disk-reserve", fmt.Sprint(diskReserve>>20))
		}
		c := NewCluster(t, g, flags...)
		c.UseProxies()
		if g == "g2" {
			c.UseSmallDisks(diskSize)
		}
		c.Form(meta.ClientAddrs(), g+"a", g+"b", g+"c")
		groups = append(groups, c)
	}
	t.Logf("chaos: g2's small disks are %s", map[bool]string{true: "tmpfs mounts", false: "fault injection (--disk-free-file)"}[groups[1].SmallDisksReal()])
	servers := meta.ClientAddrs()
	h := NewHistory()
	subjects := []string{"orders", "payments", "refunds", "invoices"}
	consumerGroups := []string{"billing", "audit"}

	var subs []*qmq.Subscription
	for _, s := range subjects {
		for _, g := range consumerGroups {
			sub, err := qmq.Subscribe(servers, s, g, func(_ context.Context, m *qmq.Message) error {
				h.Delivered(g, m, time.Now())
				return nil
			}, qmq.WithPullWait(500*time.Millisecond), qmq.WithWorkers(2), qmq.StartAt(qmq.Earliest))
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
	}
	defer func() {
		for _, s := range subs {
			s.Close()
		}
	}()

	stop := make(chan struct{})
	var senders sync.WaitGroup
	for i := range 5 {
		senders.Add(1)
		go func() {
			defer senders.Done()
			send(t, h, servers, subjects, uint64(seed)+uint64(i), i == 0, stop)
		}()
	}
	senders.Add(1)
	go func() {
		defer senders.Done()
		sendAtLimits(t, h, servers, subjects, uint64(seed)+99, stop)
	}()

	ch := NewChaos(t, seed, meta, groups...)
	if only := os.Getenv("QMQ_CHAOS_ONLY"); only != "" {
		ch.Only = strings.Split(only, ",")
	}
	ch.SessionTimeout = sessionTimeout
	ch.DiskGroup, ch.DiskFloor, ch.DiskReserve = groups[1], diskFloor, diskReserve
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: FAILED with seed %d (make chaos SEED=%d DURATION=%s); faults so far:\n%s",
				seed, seed, d, strings.Join(ch.Schedule, "\n"))
		}
	})
	ch.Run(d)
	close(stop)
	senders.Wait()

	// Lost messages never arrive: after two minutes the checker says which.
	err := Poll(2*time.Minute, func() error {
		if n := h.Undelivered(consumerGroups); n > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered everywhere", n)
		}
		return nil
	})
	if err != nil {
		t.Logf("chaos: after waiting two minutes: %v", err)
	}
	for _, s := range subs {
		s.Close()
	}
	report := h.Check(consumerGroups)
	t.Logf("chaos: seed %d: %s", seed, ch.Summary())
	t.Logf("chaos: fault schedule:\n%s", strings.Join(ch.Schedule, "\n"))
	t.Logf("chaos: history: %s", report)
	if !report.OK() {
		t.Fatalf("chaos seed %d broke a promise: %s", seed, report)
	}
	if report.Acked < 1000 {
		t.Fatalf("only %d messages acknowledged: the run proves little", report.Acked)
	}
	if want := int(d / (15 * time.Second)); ch.Counts["kill-leader"] < want {
		t.Fatalf("%d leader kills in %s, want at least %d", ch.Counts["kill-leader"], d, want)
	}
	if want := int(d / time.Minute); ch.Counts["partition"] < want {
		t.Fatalf("%d partitions in %s, want at least %d", ch.Counts["partition"], d, want)
	}
	if d >= everyFaultWithin && ch.Only == nil {
		for _, f := range otherFaults {
			if ch.Counts[f.name] == 0 {
				t.Fatalf("no %s fault in %s (every kind is applied once before any repeats)", f.name, d)
			}
		}
	}
	for _, c := range groups {
		c.SameReplicas(3 * time.Minute)
	}
}

// send sends messages to subjects until stop: synchronously one at a time,
// or (async) keeping up to 100 asynchronous sends in flight. A tenth of
// the messages are delayed by up to 8 s.
func send(t *testing.T, h *History, servers string, subjects []string, seed uint64, async bool, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, qmq.WithSendTimeout(20*time.Second))
	if err != nil {
		t.Error(err)
		return
	}
	defer p.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	window := make(chan struct{}, 100)
	var inflight sync.WaitGroup
	defer inflight.Wait()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		m := p.GenerateMessage(subjects[rng.IntN(len(subjects))])
		m.SetBody([]byte(fmt.Sprintf("message %d", i)))
		if rng.IntN(10) == 0 {
			m.SetDelay(time.Duration(1+rng.IntN(8000)) * time.Millisecond)
		}
		h.Sending(m)
		if !async {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			h.Sent(m, p.SendMessage(ctx, m))
			cancel()
			continue
		}
		window <- struct{}{}
		inflight.Add(1)
		p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
			h.Sent(m, err)
			<-window
			inflight.Done()
		}))
	}
}

// sendAtLimits sends, every 15–30 s until stop, a message of exactly the
// largest size a message may have (qmq.MaxMessageSize), immediate or
// delayed, which must be delivered like any other; and one a byte larger,
// which the SDK must refuse with ErrMessageTooLarge before it is sent.
func sendAtLimits(t *testing.T, h *History, servers string, subjects []string, seed uint64, stop chan struct{}) {
	p, err := qmq.NewProducer(servers, qmq.WithSendTimeout(60*time.Second))
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
