package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

func benchConsumeCommand() *cli.Command {
	flags := append(benchSubjectFlags(),
		&cli.StringFlag{Name: "group", Value: "bench", Usage: "consumer `GROUP` to consume as (every group gets every message: a new group starts from the subject's beginning)"},
		&cli.IntFlag{Name: "consumers", Value: 1, Usage: "`N` consumers of the group pulling at once, each its own qmq.Puller; with several subjects, max(N, --subjects) pullers, puller k reading subject k mod --subjects"},
		&cli.IntFlag{Name: "pull-batch", Value: 1000, Usage: "pull at most `N` messages at a time (the broker caps a pull at 1,000 by default)"},
		&cli.StringSliceFlag{Name: "tags", Usage: "receive only messages with any of `TAGS` (the broker filters; the rest count as consumed)"},
		&cli.Float64Flag{Name: "nack", Usage: "report a `FRACTION` of the messages (chosen by id) failed once, to come back at once, as a failing handler would; the rest are acked"},
		&cli.DurationFlag{Name: "idle", Value: 5 * time.Second, Usage: "a consumer stops once a pull has waited `DUR` with nothing to deliver (the backlog is drained)"},
	)
	flags = append(flags, benchRunFlags("stop after receiving `N` messages in all (several consumers may overshoot by part of a batch)")...)
	return &cli.Command{
		Name:  "consume",
		Usage: "drain messages with Pull and Ack; report throughput and end-to-end latency",
		Description: "Each consumer pulls up to --pull-batch messages, records them, acknowledges the whole batch\n" +
			"and waits for the ack to be committed before pulling again. Stops at --count, after\n" +
			"--duration, or once the backlog is drained (--idle). The elapsed time ends at the last ack.\n\n" +
			"Latency is end to end: from the message's CreatedAt (stamped by the producer, stored with\n" +
			"millisecond precision, so figures can read up to 1 ms high) to its receipt by the puller.\n" +
			"It assumes the producer's clock agrees with this one. Draining an old backlog measures the\n" +
			"backlog's age; run `bench produce` alongside for a live end-to-end figure, or\n" +
			"`bench produce --consume GROUP` for an exact one (nanosecond send stamps).\n\n" +
			"Examples:\n" +
			"  qmqctl bench produce --count 200000 && qmqctl bench consume --group g1 --count 200000",
		Flags: flags,
		Action: func(c *cli.Context) error {
			return runBench(c, func(ctx context.Context, b benchTarget) (*benchSummary, error) {
				return runConsume(ctx, consumeConfig{
					server: b.server, conn: b.conn, subjects: b.subjects, group: c.String("group"),
					consumers: c.Int("consumers"), pullBatch: c.Int("pull-batch"), idle: c.Duration("idle"),
					tags: c.StringSlice("tags"), nack: c.Float64("nack"),
					count: b.count, duration: b.duration, progress: b.progress, errOut: os.Stderr,
				})
			})
		},
	}
}

type consumeConfig struct {
	tags      []string // receive only messages with any of them
	nack      float64  // the fraction of messages failed once
	server    string
	conn      qmq.ConnOption
	subjects  []string
	group     string
	consumers int
	pullBatch int
	idle      time.Duration
	count     int64         // 0: no limit
	duration  time.Duration // 0: no limit
	progress  bool
	errOut    io.Writer
}

// runConsume drains the subjects. On a pull or ack failure it stops every
// consumer and returns the summary of what was done with the error.
func runConsume(ctx context.Context, cfg consumeConfig) (*benchSummary, error) {
	switch {
	case cfg.consumers < 1 || cfg.pullBatch < 1:
		return nil, fmt.Errorf("--consumers and --pull-batch must be at least 1")
	case cfg.idle <= 0:
		return nil, fmt.Errorf("--idle must be positive")
	case cfg.nack < 0 || cfg.nack > 1:
		return nil, fmt.Errorf("--nack %g: a fraction within 0..1", cfg.nack)
	}
	// A new group starts at the oldest message: the backlog is what a drain measures.
	opts := []qmq.PullerOption{cfg.conn, qmq.StartAt(qmq.Earliest)}
	if len(cfg.tags) > 0 {
		opts = append(opts, qmq.WithTags(cfg.tags...))
	}
	pullers := make([]*qmq.Puller, 0, max(cfg.consumers, len(cfg.subjects)))
	defer func() {
		for _, p := range pullers {
			p.Close()
		}
	}()
	for k := range cap(pullers) {
		p, err := qmq.NewPuller(cfg.server, cfg.subjects[k%len(cfg.subjects)], cfg.group, opts...)
		if err != nil {
			return nil, err
		}
		pullers = append(pullers, p)
	}

	// A failure stops the other consumers too; pulls are not cancelled by
	// the deadline (only by an interrupt) so that no pulled batch goes unacked.
	stopCtx, stopAll := context.WithCancel(context.Background())
	defer stopAll()
	var deadline time.Time
	var received, bytes, delayed, early atomic.Int64
	var lastAck atomic.Int64 // nanoseconds since start
	var errOnce sync.Once
	var firstErr error
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; stopAll() })
	}
	recorder := newLatencyRecorder(0)

	bar := startProgress(cfg.progress, cfg.count, cfg.duration, "consume", &received)
	start := time.Now()
	if cfg.duration > 0 {
		deadline = start.Add(cfg.duration)
	}
	var wg sync.WaitGroup
	for _, p := range pullers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			defer func() { recorder.addAll(local) }()
			for ctx.Err() == nil && stopCtx.Err() == nil {
				want := int64(cfg.pullBatch)
				if cfg.count > 0 {
					left := cfg.count - received.Load()
					if left <= 0 {
						return
					}
					want = min(want, left)
				}
				wait := cfg.idle
				if !deadline.IsZero() {
					left := time.Until(deadline)
					if left < time.Millisecond {
						return
					}
					wait = min(wait, left)
				}
				msgs, err := p.Pull(ctx, int(want), wait)
				now := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("pull %s: %w", p.Consumer(), err))
					}
					return
				}
				if len(msgs) == 0 {
					if !deadline.IsZero() && time.Until(deadline) < time.Millisecond {
						return // the run's time is up
					}
					if wait == cfg.idle {
						return // drained: nothing for --idle
					}
					continue
				}
				var n int64
				var failed, done []*qmq.Message
				for _, m := range msgs {
					if m.Deliveries() == 1 && cfg.nack > 0 && failsOnce(m.ID(), cfg.nack) {
						failed = append(failed, m)
						continue
					}
					done = append(done, m)
					from := m.CreatedAt()
					if at := m.DeliverAt(); !at.IsZero() {
						delayed.Add(1)
						if now.Before(at) {
							early.Add(1)
						}
						from = at
					}
					local = append(local, max(now.Sub(from), 0))
					n += int64(len(m.Body()))
				}
				// Acknowledge even when interrupted: the batch is ours.
				actx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				if len(failed) > 0 {
					err = p.Nack(actx, qmq.RetryAfter(0), failed...)
				}
				if err == nil {
					err = p.Ack(actx, done...)
				}
				cancel()
				msgs = done
				if err != nil {
					fail(fmt.Errorf("ack %s: %w", p.Consumer(), err))
					return
				}
				at := int64(time.Since(start))
				for {
					old := lastAck.Load()
					if at <= old || lastAck.CompareAndSwap(old, at) {
						break
					}
				}
				bytes.Add(n)
				received.Add(int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	bar.stop()

	sum := &benchSummary{
		Mode: "consume", Server: cfg.server, Subjects: cfg.subjects, Group: cfg.group,
		Clients: len(pullers), Batch: cfg.pullBatch,
		Messages: received.Load(), Bytes: bytes.Load(), Delayed: delayed.Load(), Early: early.Load(),
		Latency:   summarizeLatencies(recorder.take()),
		LatencyOf: "end to end: CreatedAt, or DeliverAt for a delayed message (ms precision, can read up to 1 ms high), to receipt by the puller",
	}
	sum.rates(time.Duration(lastAck.Load()))
	if firstErr == nil && sum.Early > 0 {
		firstErr = fmt.Errorf("%d delayed messages arrived before their delivery time", sum.Early)
	}
	switch {
	case firstErr != nil:
		sum.Note = "stopped by an error: " + firstErr.Error()
	case ctx.Err() != nil:
		sum.Note = "interrupted: figures cover the messages received before the interrupt"
	case cfg.count > 0 && sum.Messages < cfg.count && (deadline.IsZero() || time.Now().Before(deadline)):
		sum.Note = fmt.Sprintf("drained after %d of %d messages: nothing more arrived within --idle %s", sum.Messages, cfg.count, cfg.idle)
	}
	return sum, firstErr
}

// failsOnce reports whether the message with id is one of the fraction a
// --nack run fails on its first delivery: chosen by a hash of the id, so
// every consumer of the group chooses alike.
func failsOnce(id string, fraction float64) bool {
	h := fnv.New64a()
	h.Write([]byte(id))
	return float64(h.Sum64()%10000) < fraction*10000
}
