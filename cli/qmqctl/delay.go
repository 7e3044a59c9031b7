package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
)

func delayCommand() *cli.Command {
	return &cli.Command{
		Name:  "delay",
		Usage: "inspect delayed messages",
		Subcommands: []*cli.Command{{
			Name:  "stats",
			Usage: "pending delayed messages per broker group, per hour of delivery and per subject",
			Description: "Asks one node of every broker group (its leader when it answers) for the delayed messages\n" +
				"stored and not yet due. Hours are UTC; a message is counted in the hour it is due in.\n" +
				"An hour in the past still listed is being delivered now.",
			Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print each broker group's answer as JSON"}},
			Action: func(c *cli.Context) error {
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					groups, err := a.Delays(ctx)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSONTo(c.App.Writer, groups)
					}
					return printDelays(c.App.Writer, groups)
				})
			},
		}},
	}
}

// printDelays prints three tables: per broker group, per hour and per
// subject, the last two summed over the broker groups.
func printDelays(out io.Writer, groups []transport.Delays) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	hours, subjects := map[string]int64{}, map[string]int64{}
	var total int64
	fmt.Fprintln(w, "BROKER-GROUP\tNODE\tAPPLIED\tPENDING")
	for _, g := range groups {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", g.BrokerGroup, g.Node, g.AppliedIndex, g.Pending)
		total += g.Pending
		for _, h := range g.Hours {
			hours[h.Hour] += h.Pending
		}
		for s, n := range g.Subjects {
			subjects[s] += n
		}
	}
	fmt.Fprintf(w, "total\t\t\t%d\n\nHOUR (UTC)\tPENDING\n", total)
	for _, h := range slices.Sorted(maps.Keys(hours)) {
		fmt.Fprintf(w, "%s\t%d\n", h, hours[h])
	}
	fmt.Fprintln(w, "\nSUBJECT\tPENDING")
	for _, s := range slices.Sorted(maps.Keys(subjects)) {
		fmt.Fprintf(w, "%s\t%d\n", s, subjects[s])
	}
	return w.Flush()
}
