package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

// consumer-group: list, show, set, reset.

func consumerGroupCommand() *cli.Command {
	return &cli.Command{
		Name:  "consumer-group",
		Usage: "consumer groups: list, show, set, reset",
		Description: "A consumer group (consume --group NAME) is a set of consumers that together receive\n" +
			"every message of a subject once; every consumer group of a subject gets every message.\n" +
			"Each broker group of the subject holds its own part of it: these commands ask them all.\n" +
			"Not a broker group: see qmqctl broker-group. Dead letters: qmqctl deadletter.",
		Subcommands: consumerGroupCommands(),
	}
}

// lagHelp explains the figures list and show print.
const lagHelp = "LAG is what the group still owes: BACKLOG (stored, not handed out yet) + REDELIVER (due\n" +
	"again now) + RETRYING (nacked, waiting for their retry time) + UNACKED (handed to a consumer,\n" +
	"not acked yet). DEAD is the dead letters kept (messages whose last allowed delivery failed:\n" +
	"see `qmqctl deadletter`), DROPPED those dropped at the dead-letter bounds, LOST messages\n" +
	"retention removed before the group finished them. CONSUMERS is how many are online. Each\n" +
	"broker group of the subject holds its own part of the group; TOTAL adds them up."

var (
	subjectFlag       = &cli.StringFlag{Name: "subject", Required: true, Usage: "the `SUBJECT`"}
	consumerGroupFlag = &cli.StringFlag{Name: "group", Aliases: []string{"consumer-group"}, Required: true, Usage: "the consumer group's `NAME` (not a broker group)"}
	jsonFlag          = &cli.BoolFlag{Name: "json", Usage: "print as JSON"}
)

func consumerGroupCommands() []*cli.Command {
	return []*cli.Command{{
		Name:        "list",
		Usage:       "list consumer groups with their lag: of one subject, or of every subject",
		Description: "One line per consumer group, its figures summed over the subject's broker groups.\n\n" + lagHelp,
		Flags:       []cli.Flag{&cli.StringFlag{Name: "subject", Usage: "only the consumer groups of `SUBJECT` (default: every subject)"}, jsonFlag},
		Action: func(c *cli.Context) error {
			return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
				vs, err := a.ConsumerGroups(ctx, c.String("subject"))
				if c.Bool("json") {
					if vs == nil {
						vs = []admin.ConsumerGroupView{}
					}
					if perr := printJSONTo(c.App.Writer, vs); perr != nil {
						return perr
					}
					return err
				}
				w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "SUBJECT\tCONSUMER-GROUP\tLAG\tBACKLOG\tREDELIVER\tRETRYING\tUNACKED\tDEAD\tLOST\tCONSUMERS\tBROKER-GROUPS")
				for _, v := range vs {
					t := v.Total
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", v.Subject, v.Group, t.Lag, t.Backlog, t.Redeliver,
						t.Retrying, t.Unacked, t.DeadLetters, t.Lost, t.Consumers, len(v.BrokerGroups))
				}
				if ferr := w.Flush(); ferr != nil {
					return ferr
				}
				return err
			})
		},
	}, {
		Name:  "show",
		Usage: "show a consumer group: its lag and the rest per broker group and in total, and its settings",
		Description: "Asks every broker group of the subject. CURSOR and END are the group's next sequence and\n" +
			"the subject's next sequence in that broker group (sequences are per broker group).\n\n" + lagHelp,
		Flags: []cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag},
		Action: func(c *cli.Context) error {
			return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
				v, err := a.ConsumerGroup(ctx, c.String("subject"), c.String("group"))
				if v == nil {
					return err
				}
				if c.Bool("json") {
					if perr := printJSONTo(c.App.Writer, v); perr != nil {
						return perr
					}
					return err
				}
				if perr := printGroupView(c.App.Writer, v); perr != nil {
					return perr
				}
				return err
			})
		},
	}, {
		Name:  "set",
		Usage: "change a consumer group's settings (creating it, at the latest message, if it does not exist)",
		Description: "Settings not given stay as they are. Each broker group of the subject gets the change; a\n" +
			fmt.Sprintf("consumer group not known there is created with the defaults (%d deliveries, retries after %s doubling\n",
				limits.DefaultMaxDeliveries, shortDuration(limits.DefaultRetryFirst)) +
			fmt.Sprintf("to %s, ack wait %s), the changes applied, starting at the latest message: it receives what\n",
				shortDuration(limits.DefaultRetryMax), shortDuration(limits.DefaultAckWait)) +
			"is sent from then on. Set a group up this way before anything is sent to its subject.\n" +
			"Give at least one setting.\n\n" +
			"A message whose --max-deliveries-th delivery fails (a nack, an ack wait that runs out, a\n" +
			"consumer that dies) becomes a dead letter instead. A failed message comes back after\n" +
			"--retry-first, twice as long each later time, at most --retry-max. A message unacked for\n" +
			"--ack-wait goes back to the group. Durations are Go durations (90s, 15m, 2h30m).",
		Flags: append([]cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag}, settingFlags()...),
		Action: func(c *cli.Context) error {
			ch, err := changesFromFlags(c)
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			if ch == (admin.ConsumerGroupChanges{}) {
				return cmdline.Usagef(c, "give at least one setting to change: --max-deliveries, --retry-first, --retry-max, --ack-wait, --max-in-flight or --idle-expiry")
			}
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				res, err := a.SetConsumerGroup(ctx, c.String("subject"), c.String("group"), ch)
				return printChanges(c, res, err, "settings changed")
			})
		},
	}, {
		Name:  "reset",
		Usage: "move a consumer group: to the earliest message, the latest, or a time",
		Description: "--to earliest delivers again everything each broker group still keeps; --to latest SKIPS\n" +
			"THE BACKLOG: the group receives only what is sent from now on; --to an RFC 3339 time\n" +
			"(2026-01-31T09:00:00Z) moves it to the first message stored at or after then. Messages\n" +
			"due again or waiting for a retry are dropped; those handed out and not acked stay with\n" +
			"their consumers; dead letters stay. A group not known is created at that position. It\n" +
			"says first what the group holds and asks, or goes ahead with --yes.",
		Flags: []cli.Flag{subjectFlag, consumerGroupFlag, jsonFlag,
			&cli.StringFlag{Name: "to", Required: true, Usage: "`earliest`, latest, or an RFC 3339 time"}, yesFlag},
		Action: func(c *cli.Context) error {
			to, err := parseResetTarget(c.String("to"))
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				subject, group := c.String("subject"), c.String("group")
				if !c.Bool("yes") {
					v, err := a.ConsumerGroup(ctx, subject, group)
					if err != nil {
						return err
					}
					effect := map[string]string{"earliest": "delivers again every message each broker group keeps",
						"latest": fmt.Sprintf("SKIPS its backlog of %s", plural(v.Total.Backlog, "message"))}[c.String("to")]
					if effect == "" {
						effect = "skips or delivers again what lies between its position and that time"
					}
					if err := confirm(c, fmt.Sprintf("resetting consumer group %s of %s to %s %s and drops %s due again or waiting for a retry",
						group, subject, c.String("to"), effect, plural(v.Total.Redeliver+int(v.Total.Retrying), "message"))); err != nil {
						return err
					}
				}
				res, err := a.ResetConsumerGroup(ctx, c.String("subject"), c.String("group"), to)
				return printChanges(c, res, err, "reset to "+c.String("to"))
			})
		},
	}}
}

// parseResetTarget reads --to.
func parseResetTarget(s string) (admin.ResetTarget, error) {
	switch s {
	case "earliest":
		return admin.ResetToEarliest, nil
	case "latest":
		return admin.ResetToLatest, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return admin.ResetTarget{}, fmt.Errorf("--to %q: earliest, latest, or an RFC 3339 time such as 2026-01-31T09:00:00Z", s)
	}
	if t.Before(time.UnixMilli(0)) {
		return admin.ResetTarget{}, fmt.Errorf("--to %q: before 1970", s)
	}
	return admin.ResetToTime(t), nil
}

// printChanges reports what a set or reset did in each broker group.
func printChanges(c *cli.Context, res []admin.ConsumerGroupResult, err error, what string) error {
	if c.Bool("json") {
		if res == nil {
			res = []admin.ConsumerGroupResult{}
		}
		if perr := printJSONTo(c.App.Writer, res); perr != nil {
			return perr
		}
		return err
	}
	for _, r := range res {
		created := ""
		if r.Created {
			created = " (created)"
		}
		fmt.Fprintf(c.App.Writer, "broker group %s: consumer group %s of %s %s%s\n", r.BrokerGroup, c.String("group"), c.String("subject"), what, created)
	}
	return err
}

func printGroupView(out io.Writer, v *admin.ConsumerGroupView) error {
	fmt.Fprintf(out, "consumer group %s of %s\n", v.Group, v.Subject)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "BROKER-GROUP\tLAG\tBACKLOG\tREDELIVER\tRETRYING\tUNACKED\tDEAD\tDROPPED\tLOST\tCONSUMERS\tCURSOR\tEND")
	row := func(name string, g admin.ConsumerGroupInfo, seqs bool) {
		cursor, end := "-", "-"
		if seqs {
			cursor, end = fmt.Sprint(g.Cursor), fmt.Sprint(g.End)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", name, g.Lag, g.Backlog, g.Redeliver, g.Retrying,
			g.Unacked, g.DeadLetters, g.DeadDropped, g.Lost, g.Consumers, cursor, end)
	}
	for _, g := range v.BrokerGroups {
		row(g.BrokerGroup, g, true)
	}
	row("TOTAL", v.Total, false)
	if err := w.Flush(); err != nil {
		return err
	}
	if v.Total.Consumers == 0 && !v.Total.IdleSince.IsZero() {
		fmt.Fprintf(out, "no consumer online since %s\n", v.Total.IdleSince.Format(time.RFC3339))
	}
	s := v.Total.Settings
	fmt.Fprintf(out, "settings: max-deliveries %d, retry-first %s, retry-max %s, ack-wait %s, max-in-flight %s, idle-expiry %s\n",
		s.MaxDeliveries, s.RetryFirst, s.RetryMax, orZero(s.AckWait, "none"), inFlight(s.MaxInFlight), orZero(s.IdleExpiry, "never"))
	if v.SettingsDiffer {
		var parts []string
		for _, g := range v.BrokerGroups {
			parts = append(parts, fmt.Sprintf("%s %+v", g.BrokerGroup, g.Settings))
		}
		fmt.Fprintf(out, "warning: the broker groups hold different settings (set them again): %s\n", strings.Join(parts, "; "))
	}
	return nil
}

func orZero(d time.Duration, zero string) string {
	if d == 0 {
		return zero
	}
	return d.String()
}

func inFlight(n uint32) string {
	if n == 0 {
		return "the broker's default"
	}
	return fmt.Sprint(n)
}
