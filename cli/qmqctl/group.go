package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

// brokerGroupCommands are broker-group's subcommands: a broker group is
// a Raft group of broker nodes that stores subjects.
func brokerGroupCommands() []*cli.Command {
	return []*cli.Command{{
		Name:  "transfer-leader",
		Usage: "hand a broker group's (or the metaserver group's) leadership to another voter (before restarting the leader)",
		Description: "Asks the leader to hand over to --to, or to the most up-to-date voter, and waits until\n" +
			"it has. Clients follow the new leader after one quick redirect instead of waiting for an\n" +
			"election timeout. Use it before stopping the leader in a rolling restart.",
		Flags: []cli.Flag{
			brokerGroupFlag(),
			&cli.StringFlag{Name: "to", Usage: "node `ID` to hand leadership to (default: the most up-to-date voter)"},
		},
		Action: func(c *cli.Context) error {
			group := c.String("broker-group")
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.TransferLeader(ctx, group, c.String("to")); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "%s: leadership transferred\n", groupPhrase(group))
				return nil
			})
		},
	}, writableCommand("readonly", false,
		"drain a broker group: producers stop sending to it, consumers finish what it holds",
		"Producers move to the subject's other broker groups; the group's leader refuses new sends\n"+
			"with READONLY from its next heartbeat (within seconds). Consumers keep pulling from it until\n"+
			"it is empty. A subject whose only broker group is readonly cannot be sent to: assign it\n"+
			"another first (qmqctl subject assign)."),
		writableCommand("writable", true, "open a drained broker group to sends again", ""),
	}
}

func brokerGroupCommand() *cli.Command {
	return &cli.Command{
		Name:  "broker-group",
		Usage: "broker groups: transfer-leader, readonly, writable",
		Description: "A broker group is a Raft group of broker nodes (qmqd broker --broker-group NAME) that\n" +
			"stores subjects; a subject lives in one or more of them (qmqctl subject show). Not a consumer\n" +
			"group: see qmqctl consumer-group. Its members: qmqctl join and leave; its configuration:\n" +
			"qmqctl config; its nodes' state: qmqctl status.",
		Subcommands: brokerGroupCommands(),
	}
}

func writableCommand(name string, writable bool, usage, description string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, Description: description, ArgsUsage: "BROKER-GROUP",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cmdline.Usagef(c, "takes one argument, the broker group's name (got %d)", c.NArg())
			}
			group := c.Args().First()
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.SetWritable(ctx, group, writable); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "broker group %s is %s\n", group, name)
				return nil
			})
		},
	}
}

// groupCommand is `group`, the old name of two commands: consumer-group
// (list, show, set, reset) and broker-group (transfer-leader, readonly,
// writable). It runs them as before, saying on stderr which it ran.
func groupCommand() *cli.Command {
	note := func(kind string, s *cli.Command) *cli.Command {
		before := s.Before
		s.Before = func(c *cli.Context) error {
			fmt.Fprintf(c.App.ErrWriter, "qmqctl: note: \"group %s\" is now \"%s %s\" (group is its old name)\n", s.Name, kind, s.Name)
			if before != nil {
				return before(c)
			}
			return nil
		}
		s.Usage = fmt.Sprintf("the old name of `qmqctl %s %s`: %s", kind, s.Name, s.Usage)
		return s
	}
	var subs []*cli.Command
	for _, s := range consumerGroupCommands() {
		s.Category = "consumer groups (qmqctl consumer-group)"
		subs = append(subs, note("consumer-group", s))
	}
	for _, s := range brokerGroupCommands() {
		s.Category = "broker groups (qmqctl broker-group)"
		subs = append(subs, note("broker-group", s))
	}
	return &cli.Command{
		Name:   "group",
		Hidden: true,
		Usage:  "the old name of consumer-group (list, show, set, reset) and broker-group (transfer-leader, readonly, writable)",
		Description: "group is the old name of two commands, kept for scripts: `qmqctl consumer-group` (list,\n" +
			"show, set, reset: consumer groups) and `qmqctl broker-group` (transfer-leader, readonly,\n" +
			"writable: broker groups). It runs them as before and says on stderr which one it ran.",
		Subcommands: subs,
	}
}

func subjectCommand() *cli.Command {
	return &cli.Command{
		Name:  "subject",
		Usage: "show or change where subjects live",
		Subcommands: []*cli.Command{{
			Name:      "show",
			Usage:     "show a subject's broker groups and consumer groups (every subject without an argument)",
			ArgsUsage: "[SUBJECT]",
			Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
			Action: func(c *cli.Context) error {
				return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
					var routes []admin.Route
					if c.NArg() > 0 {
						r, err := a.Route(ctx, c.Args().First())
						if err != nil {
							return err
						}
						routes = []admin.Route{*r}
					} else {
						var err error
						if routes, err = a.Subjects(ctx); err != nil {
							return err
						}
					}
					if c.Bool("json") {
						return printJSONTo(c.App.Writer, routes)
					}
					for _, r := range routes {
						printRoute(c.App.Writer, &r)
					}
					return nil
				})
			},
		}, {
			Name:      "assign",
			Usage:     "route a subject to more broker groups",
			ArgsUsage: "SUBJECT (after the options)",
			Description: "Adds the --broker-groups named, or as many broker groups as it takes (least loaded first)\n" +
				"for the subject to live in --count broker groups. A route never loses a broker group: to\n" +
				"move a subject off one, assign it elsewhere and drain the broker group with\n" +
				"`qmqctl broker-group readonly`.",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "broker-groups", Aliases: []string{"groups"}, Usage: "broker groups to add, `G1,G2` (--groups: the old spelling)"},
				&cli.IntFlag{Name: "count", Usage: "live in `K` broker groups in all (at most 64; fewer if fewer are writable and available)", DefaultText: "not set"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cmdline.Usagef(c, "takes one argument, the subject (after the options; got %d)", c.NArg())
				}
				if (len(c.StringSlice("broker-groups")) > 0) == (c.Int("count") > 0) {
					return cmdline.Usagef(c, "give either --broker-groups or --count")
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					r, err := a.Assign(ctx, c.Args().First(), c.StringSlice("broker-groups"), c.Int("count"))
					if err != nil {
						return err
					}
					printRoute(c.App.Writer, r)
					return nil
				})
			},
		}, {
			Name:      "forget-group",
			Usage:     "remove a consumer group of a subject from every broker group's state",
			ArgsUsage: "SUBJECT (after the options)",
			Description: "For a consumer group that is gone for good: every broker group of the subject forgets\n" +
				"its position, its queue of messages to deliver again, and its consumers with what they\n" +
				"held unacknowledged. It frees the group's place under the broker's limits (4,096 consumer\n" +
				"groups per subject, 65,536 in all). If the group consumes again it starts afresh, as a new\n" +
				"group: at the latest message unless its consumers ask for another start, so what it had\n" +
				"not consumed is skipped. It says first what the group holds (its consumers, its backlog,\n" +
				"its unacknowledged messages) and asks, or goes ahead with --yes. Forgetting a group not\n" +
				"known is harmless.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "group", Aliases: []string{"consumer-group"}, Usage: "the consumer `GROUP` to forget", Required: true},
				yesFlag,
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return cmdline.Usagef(c, "takes one argument, the subject (after the options; got %d)", c.NArg())
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					subject, group := c.Args().First(), c.String("group")
					v, err := a.ConsumerGroup(ctx, subject, group)
					var what string
					switch {
					case v != nil:
						t := v.Total
						what = fmt.Sprintf("forgetting consumer group %s of %s destroys its position in %s, "+
							"its backlog of %s (skipped if it consumes again) and %d unacknowledged, and drops its %s",
							group, subject, plural(len(v.BrokerGroups), "broker group"), plural(t.Backlog+int64(t.Redeliver)+t.Retrying, "message"),
							t.Unacked, plural(t.Consumers, "live consumer"))
						if err != nil { // some broker group did not answer
							what += fmt.Sprintf(" (and whatever the broker groups that did not answer hold: %v)", err)
						}
					case errors.Is(err, admin.ErrNoConsumerGroup):
						// The metaserver may still record it (it counts toward
						// the limits): forgetting removes that record.
						what = fmt.Sprintf("no broker group of %s holds consumer group %s; forgetting it removes the metaserver's record of it", subject, group)
					default:
						return err
					}
					if err := confirm(c, what); err != nil {
						return err
					}
					res, err := a.ForgetConsumerGroup(ctx, subject, group)
					for _, r := range res {
						if r.Known {
							fmt.Fprintf(c.App.Writer, "broker group %s: forgot consumer group %s (%s, %s unacknowledged)\n",
								r.BrokerGroup, c.String("group"), plural(r.Consumers, "consumer"), plural(r.Unacked, "message"))
						} else {
							fmt.Fprintf(c.App.Writer, "broker group %s: consumer group %s not known\n", r.BrokerGroup, c.String("group"))
						}
					}
					return err
				})
			},
		}},
	}
}

func printRoute(w io.Writer, r *admin.Route) {
	fmt.Fprintf(w, "%s\n", r.Subject)
	for _, g := range r.BrokerGroups {
		state := "writable"
		if !g.Writable {
			state = "readonly"
		}
		if !g.Available {
			state += ", unavailable"
		}
		fmt.Fprintf(w, "  broker group %s (%s) leader %s servers %v\n", g.Name, state, orNone(g.Leader), g.Servers)
	}
	if len(r.ConsumerGroups) > 0 {
		fmt.Fprintf(w, "  consumer groups %v\n", r.ConsumerGroups)
	}
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
