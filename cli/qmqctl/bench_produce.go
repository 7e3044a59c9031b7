package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
)

func benchProduceCommand() *cli.Command {
	flags := append(benchSubjectFlags(),
		&cli.IntFlag{Name: "size", Value: 128, Usage: "message body size in `BYTES`"},
		&cli.IntFlag{Name: "inflight", Value: 1000, Usage: "messages in flight per producer (the window): at most `N` sent and not yet acknowledged; 1 measures one-at-a-time latency"},
		&cli.IntFlag{Name: "producers", Value: 1, Usage: "`N` producers sending at once, each its own qmq.Producer with its own connections and window"},
		&cli.IntFlag{Name: "batch", Value: 1000, Usage: "SDK batch: at most `N` messages in one send request (qmq.WithBatchSize)"},
		&cli.IntFlag{Name: "requests", Value: 8, Usage: "`N` SDK requests in flight per producer (qmq.WithMaxInflight)"},
		&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "count a message as failed if it is not acknowledged within `DUR` (qmq.WithSendTimeout)"},
		&cli.DurationFlag{Name: "deliver-in", Usage: "send delayed messages, the first due `DUR` after the run starts"},
		&cli.DurationFlag{Name: "deliver-over", Usage: "with --deliver-in and --count: spread the due times evenly over `DUR` (0: all due at once)"},
		&cli.StringFlag{Name: "tag", Usage: "tag every --tag-every-th message with `TAG` (for tag-filtered consumers: bench consume --tags)"},
		&cli.IntFlag{Name: "tag-every", Value: 1, Usage: "with --tag: tag one message in `N` (100: 1 %)"},
		&cli.Int64Flag{Name: "rate", Usage: "hold the send rate at `N` msgs/s in all, spread over the producers (1 to 10,000,000; unset: as fast as the window allows); a run that falls more than 10 ms behind its schedule does not burst to catch up, it slips and says by how much"},
		&cli.StringFlag{Name: "consume", Usage: "also consume the run's messages as consumer `GROUP` (starting at the earliest message: use a fresh subject) and report end-to-end latency (send call to handler, exact to the nanosecond: the body's first 8 bytes carry the send time, so --size must be at least 8) and the longest stall"},
		&cli.IntFlag{Name: "consumers", Value: 1, Usage: "with --consume: `N` subscriptions of the group per subject"},
		&cli.DurationFlag{Name: "consume-wait", Value: 10 * time.Second, Usage: "with --consume: after the last acknowledgement, wait at most `DUR` for the consumer to receive every message"},
		&cli.BoolFlag{Name: "await-fired", Usage: "with --deliver-in: after sending, wait until the brokers hold none of the run's subjects pending, and report how fast they were fired"},
	)
	flags = append(flags, benchRunFlags("send `N` messages in all, shared among the producers")...)
	return &cli.Command{
		Name:  "produce",
		Usage: "send messages as fast as the window allows, or at a fixed rate; report throughput, enqueue-to-ack and end-to-end latency",
		Description: "Each producer keeps --inflight messages sent and not yet acknowledged, using SendAsync,\n" +
			"and measures every message's latency from the SendAsync call to its callback (the broker\n" +
			"group has committed it on a quorum and applied it). Prints msgs/s, MB/s of message bodies,\n" +
			"and latency percentiles (exact: every sample is kept, 8 bytes a message). Exits 1 if any\n" +
			"send failed.\n\n" +
			"--rate N holds N msgs/s in all: the producers share one schedule, a send never goes before\n" +
			"its slot, and one more than 10 ms late makes the schedule slip instead of bursting; the\n" +
			"summary gives the achieved rate and how far the run fell behind. --consume GROUP subscribes\n" +
			"to the subjects first and adds end-to-end latency (send call to handler, from a nanosecond\n" +
			"stamp in the body's first 8 bytes) and the longest stall: the longest stretch with neither\n" +
			"an acknowledgement nor a receipt.\n\n" +
			"Examples:\n" +
			"  qmqctl bench produce --size 1024 --count 200000\n" +
			"  qmqctl bench produce --inflight 1 --duration 10s\n" +
			"  qmqctl bench produce --subject live-1 --rate 20000 --duration 30s --consume live\n" +
			"  qmqctl bench produce --count 200000 --deliver-in 30s --deliver-over 20s   (10,000 due a second)",
		Flags: flags,
		Action: func(c *cli.Context) error {
			if c.IsSet("rate") {
				if err := checkRate(c.Int64("rate")); err != nil {
					return err
				}
			}
			return runBench(c, func(ctx context.Context, b benchTarget) (*benchSummary, error) {
				return runProduce(ctx, produceConfig{rate: c.Int64("rate"),
					consume: c.String("consume"), consumers: c.Int("consumers"), consumeWait: c.Duration("consume-wait"),
					server: b.server, conn: b.conn, subjects: b.subjects, size: c.Int("size"),
					count: b.count, duration: b.duration, inflight: c.Int("inflight"), producers: c.Int("producers"),
					batch: c.Int("batch"), requests: c.Int("requests"), timeout: c.Duration("timeout"),
					deliverIn: c.Duration("deliver-in"), deliverOver: c.Duration("deliver-over"), awaitFired: c.Bool("await-fired"),
					tag: c.String("tag"), tagEvery: c.Int("tag-every"),
					progress: b.progress, errOut: os.Stderr,
				})
			})
		},
	}
}

type produceConfig struct {
	rate int64 // msgs/s in all (0: as fast as the window allows)
	// End to end: a consumer group ("": none) with consumers subscriptions
	// per subject, waited for up to consumeWait after the last ack.
	consume     string
	consumers   int
	consumeWait time.Duration
	tag         string // tag one message in tagEvery with it ("": none)
	tagEvery    int
	server      string
	conn        qmq.ConnOption
	subjects    []string
	size        int
	count       int64         // 0: no limit
	duration    time.Duration // 0: no limit
	inflight    int
	producers   int
	batch       int
	requests    int
	timeout     time.Duration
	// Delayed messages: the first due deliverIn after the start, the rest
	// spread over deliverOver; awaitFired waits for them to be fired.
	deliverIn, deliverOver time.Duration
	awaitFired             bool
	progress               bool
	errOut                 io.Writer
}

// dueAt returns when the k-th message (from 1) of a run that started at
// start is due, or the zero time for an ordinary message.
func (cfg *produceConfig) dueAt(start time.Time, k int64) time.Time {
	if cfg.deliverIn <= 0 {
		return time.Time{}
	}
	at := start.Add(cfg.deliverIn)
	if cfg.count > 0 {
		at = at.Add(time.Duration(float64(cfg.deliverOver) * float64(k-1) / float64(cfg.count)))
	}
	return at
}

// maxShownErrors is how many send errors are printed; the rest are counted.
const maxShownErrors = 5

func runProduce(ctx context.Context, cfg produceConfig) (*benchSummary, error) {
	switch {
	case cfg.size < 0:
		return nil, fmt.Errorf("--size cannot be negative")
	case cfg.inflight < 1 || cfg.producers < 1:
		return nil, fmt.Errorf("--inflight and --producers must be at least 1")
	case cfg.deliverIn < 0 || cfg.deliverOver < 0:
		return nil, fmt.Errorf("--deliver-in and --deliver-over cannot be negative")
	case cfg.deliverOver > 0 && (cfg.deliverIn == 0 || cfg.count == 0):
		return nil, fmt.Errorf("--deliver-over needs --deliver-in and --count")
	case cfg.awaitFired && cfg.deliverIn == 0:
		return nil, fmt.Errorf("--await-fired needs --deliver-in")
	}
	if cfg.rate != 0 {
		if err := checkRate(cfg.rate); err != nil {
			return nil, err
		}
	}
	if cfg.consume != "" {
		switch {
		case cfg.size < stampSize:
			return nil, fmt.Errorf("--consume needs --size of at least %d: the body carries the send time", stampSize)
		case cfg.consumers < 1:
			return nil, fmt.Errorf("--consumers must be at least 1, got %d", cfg.consumers)
		case cfg.consumeWait <= 0:
			return nil, fmt.Errorf("--consume-wait must be positive")
		case cfg.deliverIn > 0:
			return nil, fmt.Errorf("--consume measures ordinary messages, not delayed ones (--deliver-in)")
		}
	}
	producers := make([]*qmq.Producer, 0, cfg.producers)
	defer func() {
		for _, p := range producers {
			p.Close()
		}
	}()
	for range cfg.producers {
		p, err := qmq.NewProducer(cfg.server, cfg.conn, qmq.WithBatchSize(cfg.batch),
			qmq.WithMaxInflight(cfg.requests), qmq.WithSendTimeout(cfg.timeout))
		if err != nil {
			return nil, err
		}
		producers = append(producers, p)
	}

	body := make([]byte, cfg.size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	var issued, acked, failed atomic.Int64
	var errMu sync.Mutex
	shown := 0
	reportErr := func(err error) {
		errMu.Lock()
		defer errMu.Unlock()
		if shown < maxShownErrors {
			fmt.Fprintf(cfg.errOut, "qmqctl: %v\n", err)
		} else if shown == maxShownErrors {
			fmt.Fprintf(cfg.errOut, "qmqctl: further send errors are counted, not shown\n")
		}
		shown++
	}
	recorders := make([]*latencyRecorder, len(producers))
	perProducer := 0
	if cfg.count > 0 && cfg.count <= 10_000_000 {
		perProducer = int(cfg.count)/len(producers) + 1
	}

	var consumer *e2eConsumer
	e2e := newLatencyRecorder(0)
	if cfg.consume != "" {
		var err error
		consumer, err = startE2E(e2eConfig{server: cfg.server, conn: cfg.conn, subjects: cfg.subjects, group: cfg.consume, consumers: cfg.consumers,
			start: time.Now(), latency: func(d time.Duration, _ int) { e2e.add(d) }})
		if err != nil {
			return nil, err
		}
		defer consumer.stop()
	}
	// The run starts once the consumer, if any, has subscribed.
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if cfg.duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.duration)
	}
	defer cancel()
	start := time.Now()
	stall := newStallClock(start)
	if consumer != nil {
		consumer.setStall(stall)
	}
	bar := startProgress(cfg.progress, cfg.count, cfg.duration, "produce", &acked)
	var pace *pacer
	if cfg.rate > 0 {
		pace = newPacer(float64(cfg.rate), start)
	}
	var wg sync.WaitGroup
	for i, p := range producers {
		rec := newLatencyRecorder(perProducer)
		recorders[i] = rec
		wg.Add(1)
		go func() {
			defer wg.Done()
			window := make(chan struct{}, cfg.inflight)
			var sends sync.WaitGroup
			defer sends.Wait()
			for runCtx.Err() == nil {
				select {
				case window <- struct{}{}:
				case <-runCtx.Done():
					return
				}
				if pace != nil && !pace.wait(runCtx) {
					<-window
					return
				}
				k := issued.Add(1)
				if runCtx.Err() != nil {
					<-window
					return
				}
				if cfg.count > 0 && k > cfg.count {
					<-window
					return
				}
				m := p.GenerateMessage(cfg.subjects[(k-1)%int64(len(cfg.subjects))])
				b := body
				if consumer != nil {
					b = make([]byte, len(body))
					copy(b, body)
				}
				m.SetBody(b)
				m.SetDeliverAt(cfg.dueAt(start, k))
				if cfg.tag != "" && k%int64(cfg.tagEvery) == 0 {
					m.AddTag(cfg.tag)
				}
				sends.Add(1)
				t0 := time.Now()
				if consumer != nil {
					stampBody(b, t0)
				}
				p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
					now := time.Now()
					if err != nil {
						failed.Add(1) // a failure is no sign of life: it ends no stall
						reportErr(err)
					} else {
						stall.event(now)
						rec.add(now.Sub(t0))
						acked.Add(1)
					}
					<-window
					sends.Done()
				}))
			}
		}()
	}
	wg.Wait()
	sent := time.Now()
	elapsed := sent.Sub(start)
	bar.stop()
	var drained bool
	if consumer != nil {
		drained = consumer.await(ctx, acked.Load(), cfg.consumeWait)
	}

	var samples []time.Duration
	for _, r := range recorders {
		samples = append(samples, r.take()...)
	}
	sum := &benchSummary{
		Mode: "produce", Server: cfg.server, Subjects: cfg.subjects, Size: cfg.size,
		Clients: cfg.producers, Inflight: cfg.inflight, Batch: cfg.batch, Requests: cfg.requests,
		Messages: acked.Load(), Failed: failed.Load(), Bytes: acked.Load() * int64(cfg.size),
		Latency:   summarizeLatencies(samples),
		LatencyOf: "enqueue (SendAsync) to acknowledgement (callback), successful sends only",
	}
	sum.rates(elapsed)
	if consumer != nil {
		lat := summarizeLatencies(e2e.take())
		sum.Group, sum.Consumers, sum.Received, sum.Stale = cfg.consume, cfg.consumers, consumer.received.Load(), consumer.stale.Load()
		sum.E2E, sum.E2EOf = &lat, "send call to the handler's receipt (nanosecond stamp in the body), messages of this run"
		sum.MaxStall = ms(stall.longest(sent))
		if !drained && ctx.Err() == nil {
			sum.Note = fmt.Sprintf("the consumer received %d of %d acknowledged messages within --consume-wait %s", sum.Received, sum.Messages, cfg.consumeWait)
		}
	}
	if pace != nil {
		late, slipped := pace.behind()
		sum.Rate, sum.MaxLate, sum.Slipped = cfg.rate, ms(late), slipped.Seconds()
	}
	if cfg.deliverIn > 0 {
		sum.DeliverIn, sum.DeliverOver = cfg.deliverIn.Seconds(), cfg.deliverOver.Seconds()
	}
	if ctx.Err() != nil {
		sum.Note = "interrupted: figures cover the messages sent before the interrupt"
		return sum, nil
	}
	if cfg.awaitFired && sum.Messages > 0 {
		if err := awaitFired(ctx, cfg, start, sum); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// awaitFired polls the brokers' delay stats until none of the run's
// subjects has a message pending, and records how long firing took from
// the moment the first message fell due.
func awaitFired(ctx context.Context, cfg produceConfig, start time.Time, sum *benchSummary) error {
	a, err := admin.New(cfg.server, cfg.conn)
	if err != nil {
		return err
	}
	defer a.Close()
	firstDue := cfg.dueAt(start, 1)
	for {
		groups, err := a.Delays(ctx)
		if err != nil {
			return fmt.Errorf("await fired: %w", err)
		}
		var pending int64
		for _, g := range groups {
			for _, s := range cfg.subjects {
				pending += g.Subjects[s]
			}
		}
		if pending == 0 {
			took := time.Since(firstDue)
			sum.FiredIn = took.Seconds()
			if took > 0 {
				sum.FiredPerS = float64(sum.Messages) / took.Seconds()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
