package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send messages; prints the id of each acknowledged one",
		ArgsUsage: "[BODY]",
		Description: "Sends --count messages with the same subject, properties, tags and body, and prints one\n" +
			"message id per line as each is acknowledged (committed on a quorum). Exits 1 if any failed.\n" +
			"With --delay or --at the messages are delivered no earlier than that time, up to two years\n" +
			"ahead (the broker's --max-delay); a time already past is delivered at once.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subject", Required: true, Usage: "`SUBJECT` to send to"},
			&cli.StringSliceFlag{Name: "property", Aliases: []string{"p"}, Usage: "property `KEY=VALUE` (repeatable)"},
			&cli.StringSliceFlag{Name: "tag", Usage: "`TAG` (repeatable, at most 10)"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "send `N` messages"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up on a message after `DUR`"},
			&cli.DurationFlag{Name: "delay", Usage: "deliver `DUR` from now (e.g. 90s, 36h)"},
			&cli.StringFlag{Name: "at", Usage: "deliver at `TIME` (RFC 3339, e.g. 2027-01-31T09:00:00Z)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return fmt.Errorf("send takes at most one BODY argument, got %d (quote the body)", c.NArg())
			}
			props, err := parseProperties(c.StringSlice("property"))
			if err != nil {
				return err
			}
			if c.Int("count") < 1 {
				return fmt.Errorf("--count must be at least 1")
			}
			deliverAt, err := deliveryTime(c.Duration("delay"), c.String("at"), c.IsSet("delay"))
			if err != nil {
				return err
			}
			p, err := qmq.NewProducer(c.String("server"), connOption(c), qmq.WithSendTimeout(c.Duration("timeout")))
			if err != nil {
				return err
			}
			defer p.Close()
			var mu sync.Mutex
			var wg sync.WaitGroup
			failed := 0
			var unreachable error // reported once
			for range c.Int("count") {
				m := p.GenerateMessage(c.String("subject"))
				for _, kv := range props {
					m.SetString(kv[0], kv[1])
				}
				for _, tag := range c.StringSlice("tag") {
					m.AddTag(tag)
				}
				m.SetBody([]byte(c.Args().First()))
				m.SetDeliverAt(deliverAt)
				wg.Add(1)
				p.SendAsync(m, qmq.SendFunc(func(m *qmq.Message, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failed++
						if errors.Is(err, qmq.ErrUnreachable) {
							unreachable = err
							return
						}
						fmt.Fprintf(os.Stderr, "qmqctl: %v\n", err)
						return
					}
					fmt.Println(m.ID())
				}))
			}
			wg.Wait()
			if unreachable != nil && failed == c.Int("count") {
				return plain(unreachable)
			}
			if failed > 0 {
				fmt.Fprintf(os.Stderr, "qmqctl: %d of %d messages failed\n", failed, c.Int("count"))
				return errFailed
			}
			return nil
		},
	}
}

// deliveryTime turns --delay or --at into a delivery time; the zero time
// for neither.
func deliveryTime(delay time.Duration, at string, delaySet bool) (time.Time, error) {
	switch {
	case delaySet && at != "":
		return time.Time{}, fmt.Errorf("give --delay or --at, not both")
	case delaySet && delay < 0:
		return time.Time{}, fmt.Errorf("--delay %s is negative", delay)
	case delaySet:
		return time.Now().Add(delay), nil
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return time.Time{}, fmt.Errorf("--at %q is not an RFC 3339 time such as 2027-01-31T09:00:00Z: %w", at, err)
		}
		return t, nil
	}
	return time.Time{}, nil
}

// parseProperties splits KEY=VALUE flags.
func parseProperties(flags []string) ([][2]string, error) {
	var out [][2]string
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--property %q: want KEY=VALUE", f)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}
