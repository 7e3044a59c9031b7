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
}

func consumeCommand() *cli.Command {
	return &cli.Command{
		Name:  "consume",
		Usage: "consume messages as one consumer of a group; prints one JSON object per message",
		Description: "Pulls messages of --subject as a consumer of --group, prints each as a JSON line (with the\n" +
			"broker group it came from), and acknowledges it once printed. Exits after --count messages,\n" +
			"or after --timeout (at most 30 s: brokers answer a pull by then) with none.\n" +
			"It pulls from every broker group of the subject at once, so it may take a few more than\n" +
			"--count; those go back to the group when its session expires (30 s), or at once to a\n" +
			"later run with the same --consumer NAME.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subject", Required: true, Usage: "`SUBJECT` to consume"},
			&cli.StringFlag{Name: "group", Required: true, Usage: "consumer `GROUP`: every group gets every message"},
			&cli.StringFlag{Name: "consumer", Usage: "consumer `NAME` within the group (default: unique to this run)"},
			&cli.IntFlag{Name: "count", Value: 0, Usage: "exit after `N` messages (0: until --timeout passes with none)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "exit after `DUR` with no message"},
		},
		Action: func(c *cli.Context) error {
			var opts []qmq.PullerOption
			if name := c.String("consumer"); name != "" {
				opts = append(opts, qmq.WithConsumerName(name))
			}
			p, err := qmq.NewPuller(c.String("server"), c.String("subject"), c.String("group"), opts...)
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
					out := consumed{ID: m.ID(), Subject: m.Subject(), Properties: m.Properties(),
						Tags: m.Tags(), CreatedAt: m.CreatedAt(), Body: string(m.Body()), Group: m.BrokerGroup()}
					if at := m.DeliverAt(); !at.IsZero() {
						out.DeliverAt = &at
					}
					enc.Encode(out)
				}
				if err := p.Ack(ctx, msgs...); err != nil {
					return fmt.Errorf("ack: %w", err)
				}
				count += len(msgs)
			}
			return nil
		},
	}
}
