package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/wait"
)

// ombConfig is how a workload runs: the client's settings, and the
// durations (the workload's unless given).
type ombConfig struct {
	server   string
	conn     qmq.ConnOption // how to connect: the global --tls-* flags
	prefix   string         // subjects are PREFIX-NAME-RANDOM-i
	duration time.Duration  // measured phase
	warmup   time.Duration  // before it, not counted
	period   time.Duration  // between two progress lines
	inflight int            // messages in flight per producer
	batch    int            // SDK batch
	requests int            // SDK requests in flight per producer
	timeout  time.Duration  // send timeout
	progress io.Writer      // the lines every period
}

// ombRun is one workload's run: its counters and histograms.
type ombRun struct {
	w   *ombWorkload
	cfg ombConfig

	subjects []string
	payloads [][]byte // the bodies to copy (stamped after copying)

	measuring atomic.Bool // past the warm-up: the aggregate histograms count
	pubPeriod atomic.Pointer[latencyHistogram]
	e2ePeriod atomic.Pointer[latencyHistogram]
	pubAll    *latencyHistogram
	e2eAll    *latencyHistogram
	stall     *stallClock

	sent, failed, sentBytes atomic.Int64 // acknowledged sends, failed sends
	measuredSent            atomic.Int64 // acknowledged sends made in the measured phase
	received, recvBytes     atomic.Int64

	errMu sync.Mutex
	shown int
}

// runOMB runs a workload: subscriptions first, then the producers for the
// warm-up and the measured phase, a progress line every period; the
// result holds the measured phase only.
func runOMB(ctx context.Context, w *ombWorkload, cfg ombConfig) (*ombResult, error) {
	switch {
	case cfg.duration <= 0 || cfg.duration > ombMaxDurationGiven:
		return nil, fmt.Errorf("%w: the test duration %s: within (0, %s] (testDurationMinutes or --duration)", errWorkload, cfg.duration, ombMaxDurationGiven)
	case cfg.warmup < 0 || cfg.warmup > ombMaxDurationGiven:
		return nil, fmt.Errorf("%w: the warm-up %s: within [0, %s]", errWorkload, cfg.warmup, ombMaxDurationGiven)
	case cfg.period < ombMinPeriod || cfg.period > ombMaxPeriod:
		return nil, fmt.Errorf("--period %s: within %s..%s", cfg.period, ombMinPeriod, ombMaxPeriod)
	case cfg.inflight < 1 || cfg.batch < 1 || cfg.requests < 1 || cfg.timeout <= 0:
		return nil, fmt.Errorf("--inflight, --batch, --requests and --timeout must be positive")
	}
	r := &ombRun{w: w, cfg: cfg, pubAll: new(latencyHistogram), e2eAll: new(latencyHistogram)}
	r.pubPeriod.Store(new(latencyHistogram))
	r.e2ePeriod.Store(new(latencyHistogram))
	r.subjects = ombSubjects(cfg.prefix, w.Name, w.Topics)
	r.payloads = ombPayloads(w)

	start := time.Now()
	var consumers []*e2eConsumer
	defer func() {
		for _, c := range consumers {
			c.stop()
		}
	}()
	for s := range w.SubscriptionsPerTopic {
		group := fmt.Sprintf("sub-%03d", s)
		c, err := startE2E(e2eConfig{server: cfg.server, conn: cfg.conn, subjects: r.subjects, group: group, consumers: w.ConsumerPerSubscription,
			start: start, latency: r.receipt})
		if err != nil {
			return nil, err
		}
		consumers = append(consumers, c)
	}

	producers := make([]*qmq.Producer, 0, len(r.subjects)*w.ProducersPerTopic)
	defer func() {
		for _, p := range producers {
			p.Close()
		}
	}()
	for range cap(producers) {
		p, err := qmq.NewProducer(cfg.server, cfg.conn, qmq.WithBatchSize(cfg.batch), qmq.WithMaxInflight(cfg.requests), qmq.WithSendTimeout(cfg.timeout))
		if err != nil {
			return nil, err
		}
		producers = append(producers, p)
	}
	// Stalls count from when the producers start.
	r.stall = newStallClock(time.Now())
	for _, c := range consumers {
		c.setStall(r.stall)
	}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var wg sync.WaitGroup
	for i, p := range producers {
		var pace *pacer
		if w.ProducerRate > 0 {
			pace = newPacer(float64(w.ProducerRate)/float64(len(producers)), time.Now())
		}
		wg.Go(func() { r.produce(sendCtx, p, r.subjects[i%len(r.subjects)], pace, i) })
	}

	res := newOMBResult(w)
	if cfg.warmup > 0 {
		fmt.Fprintf(cfg.progress, "----- warm-up for %s\n", cfg.warmup)
		r.phase(ctx, cfg.warmup, nil)
	}
	r.measuring.Store(true)
	fmt.Fprintf(cfg.progress, "----- benchmark traffic for %s\n", cfg.duration)
	from := time.Now()
	recvFrom := r.received.Load()
	r.phase(ctx, cfg.duration, res)
	r.measuring.Store(false)
	elapsed := time.Since(from)
	received := r.received.Load() - recvFrom
	stopSending()
	wg.Wait() // every send of the run has its answer: acked, failed or timed out
	res.aggregate(r, elapsed, r.measuredSent.Load(), received)
	res.MaxStallMs = ms(r.stall.longest(time.Now()))
	if ctx.Err() != nil {
		res.Note = "interrupted: figures cover the run until the interrupt"
	}
	return res, nil
}

// ombSubjects names a run's subjects: fresh ones every run, as OMB creates
// new topics, from the workload's name made a valid subject name.
func ombSubjects(prefix, name string, n int) []string {
	clean := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			return c
		}
		return '-'
	}, name)
	clean = strings.Trim(clean, "-")
	if len(clean) > 60 {
		clean = clean[:60]
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s-%s-%d", prefix, clean, hex.EncodeToString(id[:]), i)
	}
	return out
}

// ombPayloads returns the bodies a run copies: one of 'a' … 'z'
// repeating, or the pool of randomized payloads (randomBytesRatio of
// each random, the rest zero).
func ombPayloads(w *ombWorkload) [][]byte {
	if !w.UseRandomizedPayloads {
		b := make([]byte, w.MessageSize)
		for i := range b {
			b[i] = 'a' + byte(i%26)
		}
		return [][]byte{b}
	}
	out := make([][]byte, w.poolSize())
	random := int(float64(w.MessageSize) * w.RandomBytesRatio)
	for i := range out {
		b := make([]byte, w.MessageSize)
		_, _ = rand.Read(b[:random])
		out[i] = b
	}
	return out
}

// produce sends to subject until ctx ends, paced if pace is not nil, with
// at most --inflight sends unanswered; it returns once each is answered.
func (r *ombRun) produce(ctx context.Context, p *qmq.Producer, subject string, pace *pacer, seed int) {
	window := make(chan struct{}, r.cfg.inflight)
	var sends sync.WaitGroup
	defer sends.Wait()
	rnd := mrand.New(mrand.NewPCG(uint64(seed), uint64(time.Now().UnixNano())))
	for {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if pace != nil && !pace.wait(ctx) || ctx.Err() != nil {
			return
		}
		body := make([]byte, r.w.MessageSize)
		copy(body, r.payloads[rnd.IntN(len(r.payloads))])
		m := p.GenerateMessage(subject)
		m.SetBody(body)
		sends.Add(1)
		measured := r.measuring.Load()
		t0 := time.Now()
		stampBody(body, t0)
		p.SendAsync(m, qmq.SendFunc(func(_ *qmq.Message, err error) {
			now := time.Now()
			if err != nil {
				r.failed.Add(1)
				r.reportErr(err)
			} else {
				d := now.Sub(t0)
				r.pubPeriod.Load().add(d)
				if measured {
					r.pubAll.add(d)
					r.measuredSent.Add(1)
				}
				r.sent.Add(1)
				r.sentBytes.Add(int64(len(body)))
				r.stall.event(now)
			}
			<-window
			sends.Done()
		}))
	}
}

// receipt counts a message of the run received by a handler.
func (r *ombRun) receipt(d time.Duration, size int) {
	r.e2ePeriod.Load().add(d)
	if r.measuring.Load() {
		r.e2eAll.add(d)
	}
	r.received.Add(1)
	r.recvBytes.Add(int64(size))
}

func (r *ombRun) reportErr(err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if r.shown < maxShownErrors {
		fmt.Fprintf(r.cfg.progress, "qmqctl: %v\n", err)
	} else if r.shown == maxShownErrors {
		fmt.Fprintf(r.cfg.progress, "qmqctl: further send errors are counted, not shown\n")
	}
	r.shown++
}

// phase runs for d (or until ctx ends), printing a line every period and
// at the end of a shorter last one: ⌈d / period⌉ lines; with res, each
// line's figures are appended to it.
func (r *ombRun) phase(ctx context.Context, d time.Duration, res *ombResult) {
	// Period k ends at begin + k × period (the last at end): a late
	// timer shortens the next period rather than adding one.
	begin := time.Now()
	end, last := begin.Add(d), begin
	sent, failed, sentBytes, recv, recvBytes := r.sent.Load(), r.failed.Load(), r.sentBytes.Load(), r.received.Load(), r.recvBytes.Load()
	for k := time.Duration(1); ; k++ {
		target := begin.Add(k * r.cfg.period)
		if target.After(end) {
			target = end
		}
		wait.Sleep(ctx, time.Until(target))
		now := time.Now()
		secs := max(now.Sub(last).Seconds(), 1e-9) // never 0: the rates are JSON numbers
		pub := r.pubPeriod.Swap(new(latencyHistogram))
		e2e := r.e2ePeriod.Swap(new(latencyHistogram))
		s, f, sb, rc, rb := r.sent.Load(), r.failed.Load(), r.sentBytes.Load(), r.received.Load(), r.recvBytes.Load()
		line := ombLine{
			pubRate: float64(s-sent) / secs, pubMBs: float64(sb-sentBytes) / secs / (1 << 20),
			errRate:  float64(f-failed) / secs,
			consRate: float64(rc-recv) / secs, consMBs: float64(rb-recvBytes) / secs / (1 << 20),
			backlog: max(s*int64(r.w.SubscriptionsPerTopic)-rc, 0),
			pub:     pub, e2e: e2e,
		}
		fmt.Fprintln(r.cfg.progress, line.String())
		if res != nil {
			res.addPeriod(line)
		}
		sent, failed, sentBytes, recv, recvBytes, last = s, f, sb, rc, rb, now
		if ctx.Err() != nil || !now.Before(end) {
			return
		}
	}
}

// ombLine is one period's figures, printed as OMB prints them.
type ombLine struct {
	pubRate, pubMBs, errRate, consRate, consMBs float64
	backlog                                     int64
	pub, e2e                                    *latencyHistogram
}

func (l ombLine) String() string {
	return fmt.Sprintf("Pub rate %8.1f msg/s / %5.1f MB/s | Pub err %6.1f err/s | Cons rate %8.1f msg/s / %5.1f MB/s | Backlog: %6.1f K | "+
		"Pub Latency (ms) avg: %s - 50%%: %s - 99%%: %s - 99.9%%: %s - Max: %s | E2E Latency (ms) avg: %s - 50%%: %s - 99%%: %s - 99.9%%: %s - Max: %s",
		l.pubRate, l.pubMBs, l.errRate, l.consRate, l.consMBs, float64(l.backlog)/1000,
		fmtMs(ms(l.pub.mean())), fmtMs(ms(l.pub.percentile(50))), fmtMs(ms(l.pub.percentile(99))), fmtMs(ms(l.pub.percentile(99.9))), fmtMs(ms(l.pub.percentile(100))),
		fmtMs(ms(l.e2e.mean())), fmtMs(ms(l.e2e.percentile(50))), fmtMs(ms(l.e2e.percentile(99))), fmtMs(ms(l.e2e.percentile(99.9))), fmtMs(ms(l.e2e.percentile(100))))
}
