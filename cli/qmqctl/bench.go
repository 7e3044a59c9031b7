package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/qmqgo/qmq"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure produce and consume throughput and latency, or run an OMB workload",
		Description: "`bench produce` sends generated messages and measures each one's latency from enqueue\n" +
			"to acknowledgement (committed on a quorum and applied); `bench consume` drains them with\n" +
			"Pull and Ack. Both print a summary on stdout (--json for JSON) and a progress bar on\n" +
			"stderr when it is a terminal. `bench produce --rate N` holds a fixed rate, `--consume GROUP`\n" +
			"adds a consumer and end-to-end latency; `bench omb` runs an OpenMessaging Benchmark\n" +
			"workload file; `bench hostile` plays misbehaving clients. See docs/benchmarks.md for\n" +
			"measured figures.",
		Subcommands: []*cli.Command{benchProduceCommand(), benchConsumeCommand(), benchOMBCommand(), benchHostileCommand()},
	}
}

// Flags both bench commands share.
func benchSubjectFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "subject", Value: "bench", Usage: "`SUBJECT` to use; with --subjects N > 1 it is the prefix of SUBJECT-0 … SUBJECT-(N-1)"},
		&cli.IntFlag{Name: "subjects", Value: 1, Usage: "spread the messages round-robin over `N` subjects"},
	}
}

func benchRunFlags(countUsage string) []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "count", Value: 100000, Usage: countUsage},
		&cli.DurationFlag{Name: "duration", Usage: "run for `DUR` instead of a fixed count (with --count also given, stop at whichever comes first)"},
		&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON"},
		&cli.BoolFlag{Name: "no-progress", Usage: "never show the progress bar (it shows only when stderr is a terminal)"},
	}
}

// benchSubjects returns the subjects a run uses.
func benchSubjects(c *cli.Context) ([]string, error) {
	n, name := c.Int("subjects"), c.String("subject")
	if n < 1 {
		return nil, fmt.Errorf("--subjects must be at least 1, got %d", n)
	}
	if n == 1 {
		return []string{name}, nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = name + "-" + strconv.Itoa(i)
	}
	return out, nil
}

// benchLimits reads --count and --duration: a count of 0 means no count
// limit; a duration of 0 means none. --duration alone lifts the default
// count.
func benchLimits(c *cli.Context) (count int64, duration time.Duration, err error) {
	count, duration = c.Int64("count"), c.Duration("duration")
	if duration < 0 || count < 0 {
		return 0, 0, fmt.Errorf("--count and --duration cannot be negative")
	}
	if duration > 0 && !c.IsSet("count") {
		count = 0
	}
	if count == 0 && duration == 0 {
		return 0, 0, fmt.Errorf("give a --count or a --duration")
	}
	return count, duration, nil
}

// progress draws a progress bar on stderr from a counter, refreshed by its
// own goroutine so that the hot path only bumps an atomic.
type progress struct {
	bar  *progressbar.ProgressBar
	done chan struct{}
	wg   chan struct{}
}

// startProgress shows a bar if stderr is a terminal and show is true; total
// 0 draws a spinner with the count and rate instead. Calling stop on the
// result is always safe, with or without a bar.
func startProgress(show bool, total int64, duration time.Duration, desc string, n *atomic.Int64) *progress {
	p := &progress{done: make(chan struct{}), wg: make(chan struct{})}
	if !show || !term.IsTerminal(int(os.Stderr.Fd())) {
		close(p.wg)
		return p
	}
	return p.start(os.Stderr, total, duration, desc, n)
}

func (p *progress) start(w io.Writer, total int64, duration time.Duration, desc string, n *atomic.Int64) *progress {
	max := total
	if max == 0 {
		max = -1
	}
	p.bar = progressbar.NewOptions64(max,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("msgs"),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(total > 0 && duration == 0),
		progressbar.OptionClearOnFinish(),
	)
	go func() {
		defer close(p.wg)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.bar.Set64(n.Load())
			case <-p.done:
				p.bar.Set64(n.Load())
				p.bar.Finish()
				p.bar.Clear()
				return
			}
		}
	}()
	return p
}

// stop removes the bar, so the summary prints on a clean line.
func (p *progress) stop() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	<-p.wg
}

// benchTarget is what every benchmark takes from the shared flags.
type benchTarget struct {
	server   string
	conn     qmq.ConnOption // how to connect: the global --tls-* flags
	subjects []string
	count    int64         // 0: no limit
	duration time.Duration // 0: no limit
	progress bool
}

// runBench reads the shared flags, runs a benchmark under a context that
// the first Ctrl-C cancels (a second kills at once), prints its summary
// (also when it stopped early), and exits 1 if any message failed.
func runBench(c *cli.Context, run func(context.Context, benchTarget) (*benchSummary, error)) error {
	subjects, err := benchSubjects(c)
	if err != nil {
		return err
	}
	count, duration, err := benchLimits(c)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	go func() { <-ctx.Done(); stop() }() // restore the default handler: a second Ctrl-C kills
	sum, err := run(ctx, benchTarget{server: c.String("server"), conn: connOption(c), subjects: subjects,
		count: count, duration: duration, progress: !c.Bool("no-progress")})
	if sum != nil {
		if werr := sum.write(c.App.Writer, c.Bool("json")); werr != nil && err == nil {
			err = werr
		}
	}
	if ierr := interruption(ctx); ierr != nil {
		return ierr // the summary says how far it got
	}
	if err != nil {
		return err
	}
	if sum.Failed > 0 {
		fmt.Fprintf(c.App.ErrWriter, "qmqctl: %d of %s failed\n", sum.Failed, plural(sum.Failed+sum.Messages, "message"))
		return errFailed
	}
	return nil
}
