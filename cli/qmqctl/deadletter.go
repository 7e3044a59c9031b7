package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

const deadLetterHelp = "A dead letter is a message whose delivery to its consumer group failed for the group's\n" +
	"max-deliveries-th time (see `qmqctl consumer-group set`). The broker keeps it, per consumer group, until it\n" +
	"is resent or purged. SEQUENCES ARE PER BROKER GROUP: a dead letter is named by its broker group\n" +
	"and its sequence there (both are in `deadletter list`)."

func deadLetterCommand() *cli.Command {
	brokerGroup := &cli.StringFlag{Name: "broker-group", Usage: "the `BROKER-GROUP` that keeps the dead letter (sequences are per broker group)"}
	return &cli.Command{
		Name:        "deadletter",
		Usage:       "list, show, resend or purge a consumer group's dead letters",
		Description: deadLetterHelp,
		Subcommands: []*cli.Command{{
			Name:        "list",
			Usage:       "list a consumer group's dead letters in every broker group, oldest first",
			Description: deadLetterHelp,
			Flags: []cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag,
				&cli.IntFlag{Name: "offset", Usage: "skip the first `N` of each broker group"},
				&cli.IntFlag{Name: "limit", Value: 100, Usage: fmt.Sprintf("list at most `N` of each broker group (1..%d)", limits.MaxDeadLetterPage)},
			},
			Action: func(c *cli.Context) error {
				if n := c.Int("offset"); n < 0 {
					return cmdline.Usagef(c, "--offset %d: at least 0", n)
				}
				if n := c.Int("limit"); n < 1 || n > limits.MaxDeadLetterPage {
					return cmdline.Usagef(c, "--limit %d: 1..%d", n, limits.MaxDeadLetterPage)
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					pages, err := a.DeadLetters(ctx, c.String("subject"), c.String("group"), c.Int("offset"), c.Int("limit"))
					if c.Bool("json") {
						if pages == nil {
							pages = []admin.DeadLetterPage{}
						}
						if perr := printJSONTo(c.App.Writer, pages); perr != nil {
							return perr
						}
						return err
					}
					w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "BROKER-GROUP\tSEQ\tDELIVERIES\tDIED\tID\tTAGS\tSIZE")
					for _, p := range pages {
						for _, d := range p.Letters {
							id, size := d.ID, fmt.Sprint(d.Size)
							if d.Removed {
								id, size = "(removed by retention)", "-"
							}
							fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", p.BrokerGroup, d.Seq, d.Deliveries, d.At.Format(time.RFC3339),
								id, strings.Join(d.Tags, ","), size)
						}
					}
					if ferr := w.Flush(); ferr != nil {
						return ferr
					}
					for _, p := range pages {
						fmt.Fprintf(c.App.Writer, "broker group %s: %s kept, %d listed\n", p.BrokerGroup, plural(p.Total, "dead letter"), len(p.Letters))
					}
					return err
				})
			},
		}, {
			Name:        "show",
			Usage:       "show one dead letter whole: its properties and body",
			Description: deadLetterHelp,
			Flags: []cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag, required(brokerGroup),
				&cli.Int64Flag{Name: "seq", Required: true, Usage: "the dead letter's sequence `N` in its broker group"}},
			Action: func(c *cli.Context) error {
				if n := c.Int64("seq"); n < 0 {
					return cmdline.Usagef(c, "--seq %d: at least 0", n)
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					d, err := a.DeadLetter(ctx, c.String("subject"), c.String("group"), c.String("broker-group"), c.Int64("seq"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSONTo(c.App.Writer, d)
					}
					printDeadLetter(c, d)
					return nil
				})
			},
		},
			deadLetterOpCommand("resend", "give dead letters back to their consumer group, each with its delivery count afresh", brokerGroup,
				func(ctx context.Context, a *admin.Client, subject, group string, sel admin.DeadLetterSelection) ([]admin.DeadLetterResult, error) {
					return a.ResendDeadLetters(ctx, subject, group, sel)
				}),
			deadLetterOpCommand("purge", "forget dead letters for good", brokerGroup,
				func(ctx context.Context, a *admin.Client, subject, group string, sel admin.DeadLetterSelection) ([]admin.DeadLetterResult, error) {
					return a.PurgeDeadLetters(ctx, subject, group, sel)
				}),
		},
	}
}

// required returns a copy of f that must be given.
func required(f *cli.StringFlag) *cli.StringFlag {
	r := *f
	r.Required = true
	return &r
}

func printDeadLetter(c *cli.Context, d *admin.DeadLetter) {
	out := c.App.Writer
	fmt.Fprintf(out, "dead letter %d of consumer group %s of %s in broker group %s\n", d.Seq, c.String("group"), c.String("subject"), c.String("broker-group"))
	fmt.Fprintf(out, "  deliveries  %d\n  died        %s\n", d.Deliveries, d.At.Format(time.RFC3339))
	if d.Removed {
		fmt.Fprintf(out, "  message     removed by retention\n")
		return
	}
	fmt.Fprintf(out, "  id          %s\n  created     %s\n  size        %d\n", d.ID, d.CreatedAt.Format(time.RFC3339Nano), d.Size)
	if len(d.Tags) > 0 {
		fmt.Fprintf(out, "  tags        %s\n", strings.Join(d.Tags, ","))
	}
	keys := make([]string, 0, len(d.Properties))
	for k := range d.Properties {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "  property    %s=%s\n", k, d.Properties[k])
	}
	if utf8.Valid(d.Body) {
		fmt.Fprintf(out, "  body        %s\n", d.Body)
	} else {
		fmt.Fprintf(out, "  body (base64) %s\n", base64.StdEncoding.EncodeToString(d.Body))
	}
}

type deadLetterOp func(ctx context.Context, a *admin.Client, subject, group string, sel admin.DeadLetterSelection) ([]admin.DeadLetterResult, error)

func deadLetterOpCommand(name, usage string, brokerGroup *cli.StringFlag, op deadLetterOp) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: usage + ": --all, or --broker-group B --seq N [--seq N…]",
		Description: deadLetterHelp + "\n\n--all " + name + "s every dead letter of the consumer group in every broker group;\n" +
			"--broker-group with --seq " + name + "s those sequences of that broker group.",
		Flags: []cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag, brokerGroup,
			&cli.Int64SliceFlag{Name: "seq", Usage: "a dead letter's sequence `N` in --broker-group (repeat for more)"},
			&cli.BoolFlag{Name: "all", Usage: "every dead letter of the consumer group, in every broker group"},
			yesFlag,
		},
		Action: func(c *cli.Context) error {
			sel := admin.DeadLetterSelection{All: c.Bool("all"), BrokerGroup: c.String("broker-group"), Seqs: c.Int64Slice("seq")}
			switch {
			case sel.All && (sel.BrokerGroup != "" || len(sel.Seqs) > 0):
				return cmdline.Usagef(c, "give --all, or --broker-group with --seq, not both")
			case !sel.All && (sel.BrokerGroup == "" || len(sel.Seqs) == 0):
				return cmdline.Usagef(c, "give --all, or --broker-group with --seq")
			}
			for _, n := range sel.Seqs {
				if n < 0 {
					return cmdline.Usagef(c, "--seq %d: at least 0", n)
				}
			}
			if name == "purge" {
				which := fmt.Sprintf("sequences %v of broker group %s", sel.Seqs, sel.BrokerGroup)
				if sel.All {
					which = "every one, in every broker group"
				}
				if err := confirm(c, fmt.Sprintf("purging dead letters of consumer group %s of %s (%s) destroys them for good",
					c.String("group"), c.String("subject"), which)); err != nil {
					return err
				}
			}
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				res, err := op(ctx, a, c.String("subject"), c.String("group"), sel)
				if c.Bool("json") {
					if res == nil {
						res = []admin.DeadLetterResult{}
					}
					if perr := printJSONTo(c.App.Writer, res); perr != nil {
						return perr
					}
					return err
				}
				past := map[string]string{"resend": "resent", "purge": "purged"}[name]
				for _, r := range res {
					fmt.Fprintf(c.App.Writer, "broker group %s: %s %s\n", r.BrokerGroup, plural(r.Done, "dead letter"), past)
				}
				return err
			})
		},
	}
}
