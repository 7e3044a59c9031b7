package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/version"
)

func upgradeCommand() *cli.Command {
	return &cli.Command{
		Name:  "upgrade",
		Usage: "rolling upgrades: which versions each node supports, and raising a group's active version",
		Description: "Each group (every broker group, and the metaserver group, meta) holds an active version: its\n" +
			"leader proposes only the commands, and its replicas write only the formats, of that version,\n" +
			"so that nodes of the previous release keep applying everything while a rolling upgrade is\n" +
			"under way, and any node can still go back to it. Once every node of a group runs the new\n" +
			"release, `upgrade finalize` raises the group's version: the new commands and formats are used\n" +
			"from then on, and a node of a release that does not support them refuses to start on the\n" +
			"group's data. A version is never lowered. docs/upgrading.md has the procedure.",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "show each group's active version and the versions each of its nodes supports",
			Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print as JSON"}},
			Action: func(c *cli.Context) error {
				return withAdmin(c, 20*time.Second, func(ctx context.Context, a *admin.Client) error {
					groups, err := upgradeView(ctx, a)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSONTo(c.App.Writer, groups)
					}
					return printUpgradeTable(c, groups)
				})
			},
		}, {
			Name:  "finalize",
			Usage: "raise a group's active version once every node of it supports it",
			Description: "Asks the group's leader to raise its active version to --to (default: the newest this qmqctl\n" +
				"knows, " + fmt.Sprint(version.Max) + "). The leader asks every member which versions its build supports and\n" +
				"refuses, naming the member, if one stops short or does not answer: upgrade it, or remove it\n" +
				"from the group (qmqctl leave), first. A group already there is left as it is. --all raises\n" +
				"every broker group, then the metaserver group.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "broker-group", Aliases: []string{"group"}, Usage: "the broker group's `NAME`, or meta for the metaserver group"},
				&cli.BoolFlag{Name: "all", Usage: "every broker group, then the metaserver group"},
				&cli.UintFlag{Name: "to", Value: uint(version.Max), Usage: "the version `N` to raise to"},
			},
			Action: func(c *cli.Context) error {
				group, all := c.String("broker-group"), c.Bool("all")
				if (group == "") == !all {
					return cmdline.Usagef(c, "give --broker-group NAME or --all")
				}
				to := c.Uint("to")
				if !version.Supports(version.Number(to)) {
					return cmdline.Usagef(c, "--to %d: this qmqctl knows versions %s", to, version.Build())
				}
				return withAdmin(c, time.Minute, func(ctx context.Context, a *admin.Client) error {
					groups := []string{group}
					if all {
						cl, err := a.Cluster(ctx)
						if err != nil {
							return err
						}
						groups = nil
						for _, g := range cl.BrokerGroups {
							groups = append(groups, g.Name)
						}
						slices.Sort(groups)
						groups = append(groups, admin.MetaGroup)
					}
					var errs []error
					for _, g := range groups {
						ch, err := a.SetVersion(ctx, g, uint32(to))
						if err != nil {
							errs = append(errs, fmt.Errorf("%s: %w", groupPhrase(g), err))
							continue
						}
						if ch.Previous >= ch.Active {
							fmt.Fprintf(c.App.Writer, "%s: already at version %d\n", groupPhrase(g), activeOr1(ch.Active))
						} else {
							fmt.Fprintf(c.App.Writer, "%s: version %d, was %d\n", groupPhrase(g), ch.Active, activeOr1(ch.Previous))
						}
					}
					return errors.Join(errs...)
				})
			},
		}},
	}
}

// activeOr1 is a group's recorded active version, or 1 where it records
// none (a group formed before versions were recorded).
func activeOr1(n version.Number) version.Number { return max(n, version.V1) }

// upgradeGroup is one group in `upgrade status`: its active version, as
// its leader holds it, and each node's supported versions.
type upgradeGroup struct {
	Group  string        `json:"group"`
	Active uint32        `json:"active"` // 0: its leader did not answer
	Nodes  []upgradeNode `json:"nodes"`
	// Highest is the highest version every node supports; CanRaise says
	// whether it is past Active.
	Highest  uint32 `json:"highest"`
	CanRaise bool   `json:"can_raise"`
}

type upgradeNode struct {
	ID       string `json:"id"`
	Min      uint32 `json:"min,omitempty"`
	Max      uint32 `json:"max,omitempty"`
	Leader   bool   `json:"leader,omitempty"`
	Problem  string `json:"problem,omitempty"` // it did not answer
	PreGates bool   `json:"pre_gates,omitempty"`
}

// upgradeView asks every node of the cluster for its status.
func upgradeView(ctx context.Context, a *admin.Client) ([]upgradeGroup, error) {
	cl, err := a.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	type member struct{ id, addr string }
	sets := map[string][]member{}
	var names []string
	for _, g := range cl.BrokerGroups {
		names = append(names, g.Name)
		for _, n := range g.Nodes {
			sets[g.Name] = append(sets[g.Name], member{n.ID, n.ClientAddr})
		}
	}
	slices.Sort(names)
	names = append(names, admin.MetaGroup)
	for _, m := range cl.Meta.Members {
		sets[admin.MetaGroup] = append(sets[admin.MetaGroup], member{m.ID, m.ClientAddr})
	}
	out := make([]upgradeGroup, len(names))
	var wg sync.WaitGroup
	for gi, name := range names {
		out[gi] = upgradeGroup{Group: name, Nodes: make([]upgradeNode, len(sets[name]))}
		for ni, m := range sets[name] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := upgradeNode{ID: m.id}
				defer func() { out[gi].Nodes[ni] = n }()
				if m.addr == "" {
					n.Problem = "no client address recorded"
					return
				}
				sctx, cancel := context.WithTimeout(ctx, probeTimeout)
				defer cancel()
				st, err := a.Status(sctx, m.addr)
				if err != nil {
					n.Problem = downReason(m.addr, err)
					return
				}
				r := version.Range{}
				if st.Versions != nil {
					r = *st.Versions
				}
				n.PreGates = st.Versions == nil
				r = r.OrV1()
				n.Min, n.Max, n.Leader = uint32(r.Min), uint32(r.Max), st.State == "Leader"
				if n.Leader {
					out[gi].Active = uint32(activeOr1(st.ActiveVersion))
				}
			}()
		}
	}
	wg.Wait()
	for i := range out {
		g := &out[i]
		for j, n := range g.Nodes {
			if j == 0 || n.Max < g.Highest {
				g.Highest = n.Max
			}
			if n.Problem != "" {
				g.Highest = 0
				break
			}
		}
		g.CanRaise = g.Active != 0 && g.Highest > g.Active
	}
	return out, nil
}

func printUpgradeTable(c *cli.Context, groups []upgradeGroup) error {
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tACTIVE\tNODE\tSUPPORTS\t")
	for _, g := range groups {
		active := "?"
		if g.Active != 0 {
			active = fmt.Sprint(g.Active)
		}
		for i, n := range g.Nodes {
			name, act := "", ""
			if i == 0 {
				name, act = g.Group, active
			}
			supports := fmt.Sprintf("%d-%d", n.Min, n.Max)
			switch {
			case n.Problem != "":
				supports = "DOWN: " + n.Problem
			case n.PreGates:
				supports += " (a release before versions)"
			}
			id := n.ID
			if n.Leader {
				id += " (leader)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", name, act, id, supports)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var raise []string
	for _, g := range groups {
		if g.CanRaise {
			raise = append(raise, fmt.Sprintf("%s to %d", g.Group, g.Highest))
		}
	}
	if len(raise) > 0 {
		fmt.Fprintf(c.App.Writer, "every node supports a newer version: qmqctl upgrade finalize can raise %s\n", strings.Join(raise, ", "))
	}
	return nil
}
