package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every member of the group: state, leader, term, commit and applied index",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print each member's status as JSON"}},
		Action: func(c *cli.Context) error {
			a, err := qmq.NewAdmin(c.String("server"))
			if err != nil {
				return err
			}
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			statuses := groupStatus(ctx, a)
			if c.Bool("json") {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(statuses)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "GROUP\tID\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tLAST\tCLIENT\tRAFT")
			for _, s := range statuses {
				if s.err != "" {
					fmt.Fprintf(w, "%s\t%s\tunreachable\t\t\t\t\t\t%s\t%s (%s)\n", s.Group, s.ID, s.ClientAddr, s.RaftAddr, s.err)
					continue
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", s.Group, s.ID, s.State, s.Leader,
					s.Term, s.CommitIndex, s.AppliedIndex, s.LastIndex, s.ClientAddr, s.RaftAddr)
			}
			return w.Flush()
		},
	}
}

// memberStatus is one member's status, or why it could not be had.
type memberStatus struct {
	qmq.Status
	err string
}

func (m memberStatus) MarshalJSON() ([]byte, error) {
	if m.err != "" {
		return json.Marshal(map[string]string{"id": m.ID, "client_addr": m.ClientAddr, "error": m.err})
	}
	return json.Marshal(m.Status)
}

// groupStatus asks the first reachable server for the membership, then
// every member for its own status.
func groupStatus(ctx context.Context, a *qmq.Admin) []memberStatus {
	var first *qmq.Status
	var lastErr error
	for _, addr := range a.Servers() {
		if first, lastErr = a.Status(ctx, addr); lastErr == nil {
			break
		}
	}
	if first == nil {
		return []memberStatus{{Status: qmq.Status{ClientAddr: a.Servers()[0]}, err: lastErr.Error()}}
	}
	var out []memberStatus
	for _, m := range first.Members {
		if m.ClientAddr == "" {
			out = append(out, memberStatus{Status: qmq.Status{ID: m.ID, Group: first.Group, RaftAddr: m.RaftAddr}, err: "client address not yet recorded"})
			continue
		}
		s, err := a.Status(ctx, m.ClientAddr)
		if err != nil {
			out = append(out, memberStatus{Status: qmq.Status{ID: m.ID, Group: first.Group, ClientAddr: m.ClientAddr, RaftAddr: m.RaftAddr}, err: err.Error()})
			continue
		}
		out = append(out, memberStatus{Status: *s})
	}
	return out
}

func joinCommand() *cli.Command {
	return &cli.Command{
		Name:  "join",
		Usage: "add a node to a broker group as a voter (through the group's leader)",
		Description: "Start the new node first (qmqd broker … without --bootstrap), then join it:\n" +
			"  qmqctl --server ANY-MEMBER join --group NAME --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"Joining a node that is already a member with the same addresses succeeds.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "group", Required: true, Usage: "the group's `NAME` (checked against the server's)"},
			&cli.StringFlag{Name: "id", Required: true, Usage: "the new node's `ID`"},
			&cli.StringFlag{Name: "raft", Required: true, Usage: "the new node's Raft `HOST:PORT`"},
			&cli.StringFlag{Name: "addr", Required: true, Usage: "the new node's client `HOST:PORT`"},
		},
		Action: func(c *cli.Context) error {
			return withGroup(c, func(ctx context.Context, a *qmq.Admin) error {
				if err := a.Join(ctx, c.String("id"), c.String("raft"), c.String("addr")); err != nil {
					return err
				}
				fmt.Printf("node %s joined group %s\n", c.String("id"), c.String("group"))
				return nil
			})
		},
	}
}

func leaveCommand() *cli.Command {
	return &cli.Command{
		Name:  "leave",
		Usage: "remove a node from a broker group (through the group's leader)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "group", Required: true, Usage: "the group's `NAME` (checked against the server's)"},
			&cli.StringFlag{Name: "id", Required: true, Usage: "the `ID` of the node to remove"},
		},
		Action: func(c *cli.Context) error {
			return withGroup(c, func(ctx context.Context, a *qmq.Admin) error {
				if err := a.Leave(ctx, c.String("id")); err != nil {
					return err
				}
				fmt.Printf("node %s left group %s\n", c.String("id"), c.String("group"))
				return nil
			})
		},
	}
}

// withGroup runs fn with an Admin after checking that --server belongs to
// the --group named, so a join never lands in the wrong group.
func withGroup(c *cli.Context, fn func(context.Context, *qmq.Admin) error) error {
	a, err := qmq.NewAdmin(c.String("server"))
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := a.Status(ctx, a.Servers()[0])
	if err != nil {
		return err
	}
	if st.Group != c.String("group") {
		return fmt.Errorf("server %s belongs to group %q, not %q", a.Servers()[0], st.Group, c.String("group"))
	}
	return fn(ctx, a)
}
