package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

// consumed is the JSON line printed for each message.
type consumed struct {
	ID            string            `json:"id"`
	Subject       string            `json:"subject"`
	ConsumerGroup string            `json:"consumer_group"`
	Properties    map[string]string `json:"properties"`
	Tags          []string          `json:"tags,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	DeliverAt     *time.Time        `json:"deliver_at,omitempty"` // a delayed message's delivery time
	Body          string            `json:"body"`
	BodyEncoding  string            `json:"body_encoding,omitempty"` // "base64" with --body base64
	BrokerGroup   string            `json:"broker_group"`            // where it was stored
	Deliveries    int               `json:"deliveries"`              // times its consumer group was handed it, this one included
	Failed        bool              `json:"failed,omitempty"`
}

const (
	// consumeBatch is the most messages consume asks for in one pull.
	consumeBatch = 100
	// longPoll is the longest a pull of consume waits (a broker answers
	// by its --max-pull-wait, 30 s by default): a longer --timeout pulls
	// again.
	longPoll = 30 * time.Second
)

func consumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "consume messages as one consumer of a consumer group; prints one JSON object per message",
		Description: "Pulls messages of --subject as a consumer of the consumer group --group, prints each as a\n" +
			"JSON line (with the broker group it came from and how many times the consumer group was\n" +
			"handed it), and acknowledges it once printed; with --fail it reports each as failed instead\n" +
			"(a nack), as a failing handler would: the message comes back to the consumer group after\n" +
			"its retry backoff (or --retry-after), and becomes a dead letter once the consumer group has\n" +
			"been handed it its most deliveries (see qmqctl consumer-group set and qmqctl deadletter).\n" +
			"It long-polls every broker group of the subject at once, so a message (a delayed one as it\n" +
			"falls due) is printed as soon as a broker group has it.\n\n" +
			"--body says how the body is printed: text (the default: in the JSON line, as a string;\n" +
			"bytes that are not UTF-8 come out as U+FFFD), base64 (in the JSON line, base64-encoded,\n" +
			"with \"body_encoding\": \"base64\"), or raw (the body's bytes exactly as stored, and nothing\n" +
			"else: no JSON, no newline between messages; for one message, e.g. --count 1 > file).\n\n" +
			"It exits 0 after --count messages, or without --count once --timeout passes with none.\n" +
			"With --count N it exits 1 when fewer than N came (none came for --timeout), saying how\n" +
			"many did; 130 on Ctrl-C (SIGINT), 143 on SIGTERM.\n\n" +
			"A consumer group that does not exist yet starts at the latest message (what is sent after\n" +
			"its first pull), as in QMQ; --start earliest starts it at the oldest message kept, --start\n" +
			"TIME (RFC 3339) at the first stored then. --start changes nothing for a consumer group that\n" +
			"exists (qmqctl consumer-group reset). As it waits on every broker group at once it may take\n" +
			"a few more than --count (at most one per broker group, when several receive a message at\n" +
			"once); those go back to the consumer group when its session expires (30 s), or at once to\n" +
			"a later run with the same --consumer NAME.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subject", Required: true, Usage: "`SUBJECT` to consume"},
			&cli.StringFlag{Name: "group", Aliases: []string{"consumer-group"}, Required: true, Usage: "the consumer group's `NAME`: every consumer group gets every message"},
			&cli.StringFlag{Name: "consumer", Usage: "consumer `NAME` within the consumer group (default: unique to this run)"},
			&cli.IntFlag{Name: "count", Value: 0, Usage: "exit after `N` messages; exit 1 if fewer came (0: until --timeout passes with none)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "exit after `DUR` with no message"},
			&cli.StringFlag{Name: "start", Value: "latest", Usage: "where a new consumer group starts: `latest`, earliest, or an RFC 3339 time"},
			&cli.StringFlag{Name: "body", Value: "text", Usage: "print the body as `text` (in the JSON), base64 (in the JSON) or raw (its bytes alone)"},
			&cli.BoolFlag{Name: "fail", Usage: "report every message as failed (nack) instead of acknowledging it"},
			&cli.DurationFlag{Name: "retry-after", Usage: "with --fail: bring the messages back after `DUR` instead of the consumer group's backoff"},
		},
		Action: func(c *cli.Context) error {
			start, err := startOption(c.String("start"))
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			want, wait := c.Int("count"), c.Duration("timeout")
			switch {
			case want < 0:
				return cmdline.Usagef(c, "--count %d: 0 (until --timeout passes with none) or more", want)
			case wait < 0:
				return cmdline.Usagef(c, "--timeout %s: at least 0s", wait)
			case c.IsSet("retry-after") && (!c.Bool("fail") || c.Duration("retry-after") < 0):
				return cmdline.Usagef(c, "--retry-after needs --fail and a duration of at least 0")
			}
			print, err := bodyPrinter(c.String("body"), c.String("group"), c.App.Writer)
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			// Signals are caught from before the consumer registers.
			ctx, stop := signalContext()
			defer stop()
			opts := []qmq.PullerOption{start}
			if name := c.String("consumer"); name != "" {
				opts = append(opts, qmq.WithConsumerName(name))
			}
			p, err := qmq.NewPuller(c.String("server"), c.String("subject"), c.String("group"), append(opts, connOption(c))...)
			if err != nil {
				return err
			}
			defer p.Close()
			// A Puller asked for fewer messages than the subject has broker
			// groups takes them in turns, and long-polls one at a time: a
			// message arriving in another waits for that pull to end (or is
			// missed). A long poll asks for at least one per broker group,
			// which polls them all at once.
			groups := routeGroups(c)
			count := 0
			idle := time.Now() // since the last message
			for want == 0 || count < want {
				n := consumeBatch
				if want > 0 {
					n = min(n, want-count)
				}
				var msgs []*qmq.Message
				var err error
				if left := want - count; want > 0 && left < groups {
					// Fewer wanted than broker groups: look in each without
					// waiting first, taking no more than wanted (a pull asks
					// that many of them, in turn).
					for range (groups + left - 1) / left {
						if msgs, err = p.Pull(ctx, left, 0); err != nil || len(msgs) > 0 {
							break
						}
					}
				}
				if err == nil && len(msgs) == 0 {
					n = min(limits.MaxPullMessages, max(n, groups))
					msgs, err = p.Pull(ctx, n, min(max(wait-time.Since(idle), 0), longPoll))
				}
				if err != nil {
					if ierr := interruption(ctx); ierr != nil {
						return ierr
					}
					return err
				}
				if len(msgs) == 0 {
					if time.Since(idle) >= wait {
						break
					}
					continue
				}
				if want > 0 && count+len(msgs) > want {
					msgs = msgs[:want-count] // the rest come again: see --help
				}
				for _, m := range msgs {
					if err := print(m, c.Bool("fail")); err != nil {
						return err
					}
				}
				// Settle what was printed even if a signal came meanwhile.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if c.Bool("fail") {
					var retry *qmq.RetryError
					if c.IsSet("retry-after") {
						retry = qmq.RetryAfter(c.Duration("retry-after"))
					}
					err = p.Nack(sctx, retry, msgs...)
				} else {
					err = p.Ack(sctx, msgs...)
				}
				cancel()
				if err != nil {
					return fmt.Errorf("%s: %w", map[bool]string{true: "nack", false: "ack"}[c.Bool("fail")], err)
				}
				count += len(msgs)
				idle = time.Now()
				if ierr := interruption(ctx); ierr != nil {
					return ierr
				}
			}
			if want > 0 && count < want {
				fmt.Fprintf(c.App.ErrWriter, "qmqctl consume: got %d of %s: none came for --timeout %s\n", count, plural(want, "message"), wait)
				return errFailed
			}
			return nil
		},
	}
}

// routeGroups returns how many broker groups the subject lives in, 1 if
// the route cannot be had.
func routeGroups(c *cli.Context) int {
	n := 1
	_ = withAdmin(c, 5*time.Second, func(ctx context.Context, a *admin.Client) error {
		r, err := a.Route(ctx, c.String("subject"))
		if err == nil && len(r.BrokerGroups) > 0 {
			n = len(r.BrokerGroups)
		}
		return nil
	})
	return n
}

// bodyPrinter returns what prints one message for --body: text, base64
// or raw.
func bodyPrinter(mode, group string, w io.Writer) (func(m *qmq.Message, failed bool) error, error) {
	enc := json.NewEncoder(w)
	line := func(m *qmq.Message, failed bool) consumed {
		out := consumed{ID: m.ID(), Subject: m.Subject(), ConsumerGroup: group, Properties: m.Properties(), Tags: m.Tags(),
			CreatedAt: m.CreatedAt(), BrokerGroup: m.BrokerGroup(), Deliveries: m.Deliveries(), Failed: failed}
		if at := m.DeliverAt(); !at.IsZero() {
			out.DeliverAt = &at
		}
		return out
	}
	switch mode {
	case "text":
		return func(m *qmq.Message, failed bool) error {
			out := line(m, failed)
			out.Body = string(m.Body())
			return enc.Encode(out)
		}, nil
	case "base64":
		return func(m *qmq.Message, failed bool) error {
			out := line(m, failed)
			out.Body, out.BodyEncoding = base64.StdEncoding.EncodeToString(m.Body()), "base64"
			return enc.Encode(out)
		}, nil
	case "raw":
		return func(m *qmq.Message, _ bool) error {
			_, err := w.Write(m.Body())
			return err
		}, nil
	}
	return nil, fmt.Errorf("--body %q: text, base64 or raw", mode)
}

// startOption parses --start: latest, earliest or an RFC 3339 time.
func startOption(s string) (qmq.ConsumerOption, error) {
	switch s {
	case "latest":
		return qmq.StartAt(qmq.Latest), nil
	case "earliest":
		return qmq.StartAt(qmq.Earliest), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("--start %q: latest, earliest or an RFC 3339 time (2026-11-30T09:00:00Z)", s)
	}
	return qmq.StartAtTime(t), nil
}
