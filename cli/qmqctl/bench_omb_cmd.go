package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
)

func benchOMBCommand() *cli.Command {
	return &cli.Command{
		Name:  "omb",
		Usage: "run an OpenMessaging Benchmark workload file; report as OMB does",
		Description: "Reads an OMB workload (YAML): name, topics, partitionsPerTopic (checked, then ignored: a subject\n" +
			"has no partitions), keyDistributor (checked, ignored: no keys), messageSize (8 B to 1 MiB: the\n" +
			"first 8 bytes carry the send time), useRandomizedPayloads, randomBytesRatio,\n" +
			"randomizedPayloadPoolSize, payloadFile (ignored), subscriptionsPerTopic (consumer groups),\n" +
			"consumerPerSubscription, producersPerTopic, producerRate (msgs/s in all; 0: as fast as each\n" +
			"producer's window allows), consumerBacklogSizeGB (0 only), testDurationMinutes,\n" +
			"warmupDurationMinutes. Any other field, or a value out of range, is refused.\n\n" +
			"Each run uses new subjects (PREFIX-NAME-RANDOM-i). Subscriptions start first, then the\n" +
			"producers; the warm-up is not counted. Every --period a line on stderr: publish and consume\n" +
			"rates, backlog (acknowledged × subscriptions − received), publish and end-to-end latency\n" +
			"(ms). At the end the aggregated percentiles of the measured phase (50/75/95/99/99.9/99.99/max)\n" +
			"and a JSON result with OMB's field names (--json, --output). Publish latency: SendAsync call\n" +
			"to acknowledgement; end to end: the send call to the handler. Percentiles come from a\n" +
			"histogram (256 KiB, at most 0.1 % high) so hour-long runs hold no samples.\n\n" +
			"Examples:\n" +
			"  qmqctl bench omb --workload test/benchcompare/workloads/1-topic-1-partition-100b.yaml\n" +
			"  qmqctl bench omb --workload W.yaml --duration 30s --warmup 5s --output result.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "workload", Required: true, Usage: "the OMB workload `FILE` (YAML)"},
			&cli.DurationFlag{Name: "duration", Usage: "measure for `DUR` instead of the workload's testDurationMinutes"},
			&cli.DurationFlag{Name: "warmup", Usage: "warm up for `DUR` instead of the workload's warmupDurationMinutes (0 if absent)"},
			&cli.DurationFlag{Name: "period", Value: ombDefaultPeriod, Usage: "print a progress line every `DUR` (100ms to 1h)"},
			&cli.IntFlag{Name: "inflight", Value: 1000, Usage: "at most `N` messages sent and not yet acknowledged per producer"},
			&cli.IntFlag{Name: "batch", Value: 1000, Usage: "SDK batch: at most `N` messages in one send request"},
			&cli.IntFlag{Name: "requests", Value: 8, Usage: "`N` SDK requests in flight per producer"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "count a send as failed if it is not acknowledged within `DUR`"},
			&cli.StringFlag{Name: "subject-prefix", Value: "omb", Usage: "subjects are `PREFIX`-NAME-RANDOM-i"},
			&cli.BoolFlag{Name: "json", Usage: "print the result as JSON (OMB's field names) instead of text"},
			&cli.StringFlag{Name: "output", Usage: "also write the JSON result to `FILE`"},
		},
		Action: func(c *cli.Context) error {
			w, err := readWorkload(c.String("workload"))
			if err != nil {
				fmt.Fprintln(os.Stderr, err) // it names itself: "qmqctl: bad workload: …"
				return errFailed
			}
			duration, warmup := time.Duration(w.TestDurationMinutes)*time.Minute, time.Duration(w.WarmupDurationMinutes)*time.Minute
			if c.IsSet("duration") {
				duration = c.Duration("duration")
			}
			if c.IsSet("warmup") {
				warmup = c.Duration("warmup")
			}
			ctx, stop := signalContext()
			defer stop()
			go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills
			res, err := runOMB(ctx, w, ombConfig{server: c.String("server"), conn: connOption(c), prefix: c.String("subject-prefix"),
				duration: duration, warmup: warmup, period: c.Duration("period"), inflight: c.Int("inflight"),
				batch: c.Int("batch"), requests: c.Int("requests"), timeout: c.Duration("timeout"),
				progress: os.Stderr})
			if ierr := interruption(ctx); ierr != nil && err != nil {
				return ierr
			}
			if err != nil {
				return err
			}
			if out := c.String("output"); out != "" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				if err := res.write(f, true); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
			}
			if err := res.write(os.Stdout, c.Bool("json")); err != nil {
				return err
			}
			if ierr := interruption(ctx); ierr != nil {
				return ierr // the results say how far it got
			}
			if res.PublishErrors > 0 {
				fmt.Fprintf(c.App.ErrWriter, "qmqctl: %s failed\n", plural(res.PublishErrors, "send"))
				return errFailed
			}
			return nil
		},
	}
}
