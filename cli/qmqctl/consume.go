package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

// consumed is the JSON line printed for each message.
type consumed struct {
	ID         string            `json:"id"`
	Subject    string            `json:"subject"`
	Properties map[string]string `json:"properties"`
	Tags       []string          `json:"tags,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	DeliverAt  *time.Time        `json:"deliver_at,omitempty"` // a delayed message's delivery time
	Body       string            `json:"body"`
	Group      string            `json:"broker_group"` // where it was stored
	Deliveries int               `json:"deliveries"`   // times its consumer group was handed it, this one included
	Failed     bool              `json:"failed,omitempty"`
}

func consumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "consume messages as one consumer of a group; prints one JSON object per message",
		Description: "Pulls messages of --subject as a consumer of --group, prints each as a JSON line (with the\n" +
			"broker group it came from and how many times the group was handed it), and acknowledges it once\n" +
			"printed; with --fail it reports each as failed instead (a nack), as a failing handler would: the\n" +
			"message comes back to the group after the group's retry backoff (or --retry-after), and becomes\n" +
			"a dead letter once the group has been handed it its most deliveries (see qmqctl group set and\n" +
			"qmqctl deadletter). Exits after --count messages, or after --timeout (at most 30 s: brokers\n" +
			"answer a pull by then) with none.\n" +
			"A group that does not exist yet starts at the latest message (what is sent after its first\n" +
			"pull), as in QMQ; --start earliest starts it at the oldest message kept, --start TIME (RFC 3339)\n" +
			"at the first stored then. --start changes nothing for a group that exists (qmqctl group reset).\n" +
			"It pulls from every broker group of the subject at once, so it may take a few more than\n" +
			"--count; those go back to the group when its session expires (30 s), or at once to a\n" +
			"later run with the same --consumer NAME.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subject", Required: true, Usage: "`SUBJECT` to consume"},
			&cli.StringFlag{Name: "group", Required: true, Usage: "consumer `GROUP`: every group gets every message"},
			&cli.StringFlag{Name: "consumer", Usage: "consumer `NAME` within the group (default: unique to this run)"},
			&cli.IntFlag{Name: "count", Value: 0, Usage: "exit after `N` messages (0: until --timeout passes with none)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "exit after `DUR` with no message"},
			&cli.StringFlag{Name: "start", Value: "latest", Usage: "where a new group starts: `latest`, earliest, or an RFC 3339 time"},
			&cli.BoolFlag{Name: "fail", Usage: "report every message as failed (nack) instead of acknowledging it"},
			&cli.DurationFlag{Name: "retry-after", Usage: "with --fail: bring the messages back after `DUR` instead of the group's backoff"},
		},
		Action: func(c *cli.Context) error {
			start, err := startOption(c.String("start"))
			if err != nil {
				return err
			}
			if c.IsSet("retry-after") && (!c.Bool("fail") || c.Duration("retry-after") < 0) {
				return fmt.Errorf("--retry-after needs --fail and a duration of at least 0")
			}
			opts := []qmq.PullerOption{start}
			if name := c.String("consumer"); name != "" {
				opts = append(opts, qmq.WithConsumerName(name))
			}
			p, err := qmq.NewPuller(c.String("server"), c.String("subject"), c.String("group"), append(opts, connOption(c))...)
			if err != nil {
				return err
			}
			defer p.Close()
			ctx, cancel := signalContext()
			defer cancel()
			enc := json.NewEncoder(os.Stdout)
			count, want := 0, c.Int("count")
			for want == 0 || count < want {
				max := 100
				if want > 0 {
					max = min(max, want-count)
				}
				msgs, err := p.Pull(ctx, max, c.Duration("timeout"))
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					out := consumed{ID: m.ID(), Subject: m.Subject(), Properties: m.Properties(), Tags: m.Tags(),
						CreatedAt: m.CreatedAt(), Body: string(m.Body()), Group: m.BrokerGroup(), Deliveries: m.Deliveries(), Failed: c.Bool("fail")}
					if at := m.DeliverAt(); !at.IsZero() {
						out.DeliverAt = &at
					}
					enc.Encode(out)
				}
				if c.Bool("fail") {
					var retry *qmq.RetryError
					if c.IsSet("retry-after") {
						retry = qmq.RetryAfter(c.Duration("retry-after"))
					}
					if err := p.Nack(ctx, retry, msgs...); err != nil {
						return fmt.Errorf("nack: %w", err)
					}
				} else if err := p.Ack(ctx, msgs...); err != nil {
					return fmt.Errorf("ack: %w", err)
				}
				count += len(msgs)
			}
			return nil
		},
	}
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
