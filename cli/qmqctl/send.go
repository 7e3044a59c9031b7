package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

// sendStdin is where send reads a body from stdin; tests set it.
var sendStdin io.Reader = os.Stdin

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send messages; prints the id of each acknowledged one",
		ArgsUsage: "[BODY | -]",
		Description: "Sends --count messages with the same subject, properties, tags and body, and prints one\n" +
			"message id per line as each is acknowledged (committed on a quorum). Exits 1 if any failed.\n" +
			"With --delay or --at the messages are delivered no earlier than that time, up to two years\n" +
			"ahead (the broker's --max-delay); a time already past is delivered at once.\n\n" +
			"The body is, as in nats pub: BODY; or the bytes of --file PATH; or, with BODY - or with\n" +
			"no BODY when stdin is not a terminal (a pipe, a file), everything read from stdin until\n" +
			"its end; else (no BODY on a terminal) it is empty. Bytes are sent as they are (binary\n" +
			"included); a body from stdin keeps its trailing newline. For example:\n" +
			"  echo '{\"order\": 42}' | qmqctl send --subject orders\n" +
			"  qmqctl send --subject images --file photo.jpg",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "subject", Required: true, Usage: "`SUBJECT` to send to"},
			&cli.StringSliceFlag{Name: "property", Aliases: []string{"p"}, Usage: "property `KEY=VALUE` (repeatable)"},
			&cli.StringSliceFlag{Name: "tag", Usage: "`TAG` (repeatable, at most 10)"},
			&cli.StringFlag{Name: "key", Usage: "the messages' business `KEY` (an order number: `message list --key` finds them by it)"},
			&cli.IntFlag{Name: "count", Value: 1, Usage: "send `N` messages (at least 1)"},
			&cli.StringFlag{Name: "file", Usage: "send the bytes of `PATH` as the body"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up on a message after `DUR`"},
			&cli.DurationFlag{Name: "delay", Usage: "deliver `DUR` from now (e.g. 90s, 36h)"},
			&cli.StringFlag{Name: "at", Usage: "deliver at `TIME` (RFC 3339, e.g. 2027-01-31T09:00:00Z)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return cmdline.Usagef(c, "takes at most one BODY argument, got %d (quote the body)", c.NArg())
			}
			props, err := parseProperties(c.StringSlice("property"))
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			if n := c.Int("count"); n < 1 {
				return cmdline.Usagef(c, "--count %d: at least 1", n)
			}
			deliverAt, err := deliveryTime(c.Duration("delay"), c.String("at"), c.IsSet("delay"))
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			body, err := sendBody(c)
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
				if c.IsSet("key") {
					m.SetKey(c.String("key"))
				}
				m.SetBody(body)
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
						fmt.Fprintf(c.App.ErrWriter, "qmqctl: %v\n", err)
						return
					}
					fmt.Fprintln(c.App.Writer, m.ID())
				}))
			}
			wg.Wait()
			if unreachable != nil && failed == c.Int("count") {
				return plain(unreachable)
			}
			if failed > 0 {
				fmt.Fprintf(c.App.ErrWriter, "qmqctl: %d of %s failed\n", failed, plural(c.Int("count"), "message"))
				return errFailed
			}
			return nil
		},
	}
}

// sendBody reads send's body: BODY, --file, or stdin (BODY "-", or no
// BODY and stdin not a terminal); empty with neither.
func sendBody(c *cli.Context) ([]byte, error) {
	arg, file := c.Args().First(), c.String("file")
	switch {
	case c.NArg() > 0 && file != "":
		return nil, cmdline.Usagef(c, "give a BODY or --file, not both")
	case file != "":
		return readBody(c, file, func() (io.ReadCloser, error) { return os.Open(file) })
	case c.NArg() > 0 && arg != "-":
		return []byte(arg), nil
	case arg == "-" || c.NArg() == 0 && !stdinIsTerminal():
		return readBody(c, "stdin", func() (io.ReadCloser, error) { return io.NopCloser(sendStdin), nil })
	}
	return nil, nil
}

// readBody reads a body of at most limits.MaxMessage bytes (what a
// message holds in all) from what open opens.
func readBody(c *cli.Context, what string, open func() (io.ReadCloser, error)) ([]byte, error) {
	r, err := open()
	if err != nil {
		return nil, fmt.Errorf("--file: %w", err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limits.MaxMessage+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body from %s: %w", what, err)
	}
	if len(b) > limits.MaxMessage {
		return nil, cmdline.Usagef(c, "the body from %s is larger than a message may be (%d bytes)", what, limits.MaxMessage)
	}
	return b, nil
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
