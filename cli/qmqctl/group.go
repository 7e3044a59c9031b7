package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
)

func groupCommand() *cli.Command {
	return &cli.Command{
		Name:  "group",
		Usage: "consumer groups (list, show, set, reset) and broker groups (transfer-leader, readonly, writable)",
		Description: "Two kinds of group share this command. A CONSUMER group (list, show, set, reset: --subject\n" +
			"and --group) is a set of consumers that together receive every message of a subject once.\n" +
			"A BROKER group (transfer-leader, readonly, writable) is a Raft group of broker nodes that\n" +
			"stores subjects; there --group, or the argument, names the broker group.",
		Subcommands: append(consumerGroupCommands(), &cli.Command{
			Name:     "transfer-leader",
			Category: "broker groups",
			Usage:    "hand a broker group's (or the metaserver group's) leadership to another voter (before restarting the leader)",
			Description: "Asks the leader to hand over to --to, or to the most up-to-date voter, and waits until\n" +
				"it has. Clients follow the new leader after one quick redirect instead of waiting for an\n" +
				"election timeout. Use it before stopping the leader in a rolling restart.",
			Flags: []cli.Flag{
				groupFlag,
				&cli.StringFlag{Name: "to", Usage: "node `ID` to hand leadership to (default: the most up-to-date voter)"},
			},
			Action: func(c *cli.Context) error {
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					if err := a.TransferLeader(ctx, c.String("group"), c.String("to")); err != nil {
						return err
					}
					fmt.Printf("group %s: leadership transferred\n", c.String("group"))
					return nil
				})
			},
		}, writableCommand("readonly", false,
			"drain a broker group: producers stop sending to it, consumers finish what it holds",
			"Producers move to the subject's other groups; the group's leader refuses new sends with\n"+
				"READONLY from its next heartbeat (within seconds). Consumers keep pulling from it until it is\n"+
				"empty. A subject whose only group is readonly cannot be sent to: assign it another first."),
			writableCommand("writable", true, "open a drained broker group to sends again", ""),
		),
	}
}

func writableCommand(name string, writable bool, usage, description string) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, Description: description, ArgsUsage: "BROKER-GROUP", Category: "broker groups",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("group %s takes one argument, the broker group's name", name)
			}
			group := c.Args().First()
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.SetWritable(ctx, group, writable); err != nil {
					return err
				}
				fmt.Printf("group %s is %s\n", group, name)
				return nil
			})
		},
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
						return printJSON(routes)
					}
					for _, r := range routes {
						printRoute(&r)
					}
					return nil
				})
			},
		}, {
			Name:      "assign",
			Usage:     "route a subject to more broker groups",
			ArgsUsage: "SUBJECT (after the options)",
			Description: "Adds the --groups named, or as many groups as it takes (least loaded first) for the\n" +
				"subject to live in --count groups. A route never loses a group: to move a subject off\n" +
				"a group, assign it elsewhere and drain the group with `qmqctl group readonly`.",
			Flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "groups", Usage: "broker groups to add, `G1,G2`"},
				&cli.IntFlag{Name: "count", Usage: "live in `K` groups in all (at most 64; fewer if fewer are writable and available)", DefaultText: "not set"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return fmt.Errorf("subject assign takes one argument, the subject")
				}
				if (len(c.StringSlice("groups")) > 0) == (c.Int("count") > 0) {
					return fmt.Errorf("give either --groups or --count")
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					r, err := a.Assign(ctx, c.Args().First(), c.StringSlice("groups"), c.Int("count"))
					if err != nil {
						return err
					}
					printRoute(r)
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
				&cli.StringFlag{Name: "group", Usage: "the consumer `GROUP` to forget", Required: true},
				yesFlag,
			},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return fmt.Errorf("subject forget-group takes one argument, the subject")
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					subject, group := c.Args().First(), c.String("group")
					v, err := a.ConsumerGroup(ctx, subject, group)
					var what string
					switch {
					case v != nil:
						t := v.Total
						what = fmt.Sprintf("forgetting consumer group %s of %s destroys its position in %d broker groups, "+
							"its backlog of %d messages (skipped if it consumes again) and %d unacknowledged, and drops its %d live consumers",
							group, subject, len(v.BrokerGroups), t.Backlog+int64(t.Redeliver)+t.Retrying, t.Unacked, t.Consumers)
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
							fmt.Fprintf(c.App.Writer, "broker group %s: forgot consumer group %s (%d consumers, %d messages unacknowledged)\n",
								r.BrokerGroup, c.String("group"), r.Consumers, r.Unacked)
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

func printRoute(r *admin.Route) {
	fmt.Printf("%s\n", r.Subject)
	for _, g := range r.Groups {
		state := "writable"
		if !g.Writable {
			state = "readonly"
		}
		if !g.Available {
			state += ", unavailable"
		}
		fmt.Printf("  group %s (%s) leader %s servers %v\n", g.Name, state, orNone(g.Leader), g.Servers)
	}
	if len(r.ConsumerGroups) > 0 {
		fmt.Printf("  consumer groups %v\n", r.ConsumerGroups)
	}
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
