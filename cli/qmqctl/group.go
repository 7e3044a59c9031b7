package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

func groupCommand() *cli.Command {
	return &cli.Command{
		Name:  "group",
		Usage: "operate on a broker group",
		Subcommands: []*cli.Command{{
			Name:  "transfer-leader",
			Usage: "hand the group's leadership to another voter (before restarting the leader)",
			Description: "Asks the leader to hand over to --to, or to the most up-to-date voter, and waits until\n" +
				"it has. Clients follow the new leader after one quick redirect instead of waiting for an\n" +
				"election timeout. Use it before stopping the leader in a rolling restart.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "group", Required: true, Usage: "the group's `NAME` (checked against the server's)"},
				&cli.StringFlag{Name: "to", Usage: "node `ID` to hand leadership to (default: the most up-to-date voter)"},
			},
			Action: func(c *cli.Context) error {
				return withGroup(c, func(ctx context.Context, a *qmq.Admin) error {
					if err := a.TransferLeader(ctx, c.String("to")); err != nil {
						return err
					}
					fmt.Printf("group %s: leadership transferred\n", c.String("group"))
					return nil
				})
			},
		}},
	}
}
