package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
)

// withAdmin runs fn with an admin.Client for --server (over TLS with the
// --tls-* flags) and a deadline.
func withAdmin(c *cli.Context, timeout time.Duration, fn func(context.Context, *admin.Client) error) error {
	a, err := admin.New(c.String("server"), connOption(c))
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return fn(ctx, a)
}

func printJSON(v any) error { return printJSONTo(os.Stdout, v) }

func printJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show every group of the cluster: members, leader, term, applied index and lag",
		Description: "Asks the metaserver (through --server) for every broker group, and each metaserver node\n" +
			"for its own position. LAG is how many entries a node's applied index trails its leader's;\n" +
			"BACKLOG is how many deliveries its consumer groups still owe. Broker figures come from\n" +
			"heartbeats, so they are up to a few seconds old (SEEN). TLS is on, off (plaintext on loopback\n" +
			"only) or INSECURE! (open to anyone on an address other hosts can reach, allowed by qmqd --insecure).\n" +
			"A node that serves no client (its --auth and its metaserver's differ) is named below the table, with why.\n" +
			"Below, each broker group's configuration, as its leader holds it (see config show).",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the cluster view as JSON"}},
		Action: func(c *cli.Context) error {
			return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
				cl, err := a.Cluster(ctx)
				if err != nil {
					return err
				}
				metas := metaStatus(ctx, a, cl)
				fillUnreported(ctx, a, cl)
				configs := brokerConfigsOf(ctx, a, cl)
				if c.Bool("json") {
					return printJSONTo(c.App.Writer, struct {
						Meta []memberStatus `json:"meta"`
						*admin.Cluster
						BrokerConfigs []admin.BrokerGroupConfig `json:"broker_configs"`
					}{metas, cl, configs})
				}
				if err := printStatusTable(c.App.Writer, metas, cl); err != nil {
					return err
				}
				return printConfigTable(c.App.Writer, cl, configs)
			})
		},
	}
}

func printStatusTable(out io.Writer, metas []memberStatus, cl *admin.Cluster) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "GROUP\tNODE\tSTATE\tTERM\tAPPLIED\tLAG\tBACKLOG\tSEEN\tTLS\tCLIENT\tRAFT")
	var leaderApplied uint64
	for _, s := range metas {
		if s.State == "Leader" {
			leaderApplied = s.AppliedIndex
		}
	}
	for _, s := range metas {
		if s.err != "" {
			fmt.Fprintf(w, "meta\t%s\tunreachable\t\t\t\t\t\t\t%s\t%s (%s)\n", s.ID, s.ClientAddr, s.RaftAddr, s.err)
			continue
		}
		lag := uint64(0)
		if leaderApplied > s.AppliedIndex {
			lag = leaderApplied - s.AppliedIndex
		}
		fmt.Fprintf(w, "meta\t%s\t%s\t%d\t%d\t%d\t-\tnow\t%s\t%s\t%s\n", s.ID, s.State, s.Term, s.AppliedIndex, lag,
			security(s.TLS, s.Insecure), s.ClientAddr, s.RaftAddr)
	}
	for _, g := range cl.Groups {
		name := g.Name
		switch {
		case !g.Available:
			name += " (unavailable)"
		case !g.Writable:
			name += " (readonly)"
		}
		for _, n := range g.Nodes {
			seen := "never"
			if n.SeenMillis >= 0 {
				seen = (time.Duration(n.SeenMillis) * time.Millisecond).Round(100 * time.Millisecond).String()
			}
			sec := "-" // no heartbeat yet
			if n.SeenMillis >= 0 {
				sec = security(n.TLS, n.Insecure)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", name, n.ID, n.State, n.Term, n.AppliedIndex, n.Lag, n.Backlog, seen,
				sec, n.ClientAddr, n.RaftAddr)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, g := range cl.Groups {
		for _, n := range g.Nodes {
			if n.Refusing != "" {
				fmt.Fprintf(out, "node %s of %s REFUSES CLIENTS: %s\n", n.ID, g.Name, n.Refusing)
			}
		}
	}
	fmt.Fprintf(out, "%d broker groups, %d subjects\n", len(cl.Groups), cl.Subjects)
	return nil
}

// brokerConfigsOf asks each broker group of cl for its configuration, its
// leader first; a group none of whose nodes answer has none in the list.
func brokerConfigsOf(ctx context.Context, a *admin.Client, cl *admin.Cluster) []admin.BrokerGroupConfig {
	var out []admin.BrokerGroupConfig
	for _, g := range cl.Groups {
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		if c, err := a.BrokerGroupConfigOf(gctx, g); err == nil {
			out = append(out, *c)
		}
		cancel()
	}
	return out
}

// printConfigTable prints each broker group's configuration, a row a
// group; "-" for a group that did not answer.
func printConfigTable(out io.Writer, cl *admin.Cluster, configs []admin.BrokerGroupConfig) error {
	if len(cl.Groups) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, "\nBROKER GROUP")
	for _, col := range brokerConfigColumns {
		fmt.Fprint(w, "\t", strings.ToUpper(col.name))
	}
	fmt.Fprintln(w)
	for _, g := range cl.Groups {
		fmt.Fprint(w, g.Name)
		i := slices.IndexFunc(configs, func(c admin.BrokerGroupConfig) bool { return c.BrokerGroup == g.Name })
		for _, col := range brokerConfigColumns {
			v := "-"
			if i >= 0 {
				v = col.value(configs[i])
			}
			fmt.Fprint(w, "\t", v)
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

// security is a node's TLS column: "on", "off" (plaintext on loopback
// only), or "INSECURE!" for a node open to anyone on an address other
// hosts can reach (qmqd --insecure), with TLS or without.
func security(tls, insecure bool) string {
	switch {
	case insecure:
		return "INSECURE!"
	case tls:
		return "on"
	}
	return "off"
}

// fillUnreported asks every broker node the metaserver has no heartbeat
// from (one just started, or every node but the answering one of a group
// without a metaserver) for its status directly.
func fillUnreported(ctx context.Context, a *admin.Client, cl *admin.Cluster) {
	for gi := range cl.Groups {
		g := &cl.Groups[gi]
		var leaderApplied uint64
		for ni := range g.Nodes {
			n := &g.Nodes[ni]
			if n.SeenMillis < 0 {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				if st, err := a.Status(sctx, n.ClientAddr); err == nil {
					n.State, n.Term, n.AppliedIndex, n.Backlog, n.SeenMillis = st.State, st.Term, st.AppliedIndex, st.Backlog, 0
					n.TLS, n.Insecure, n.Refusing = st.TLS, st.Insecure, st.Refusing
				}
				cancel()
			}
			if n.State == "Leader" {
				leaderApplied = n.AppliedIndex
			}
		}
		for ni := range g.Nodes {
			if n := &g.Nodes[ni]; n.State != "Unknown" && leaderApplied > n.AppliedIndex {
				n.Lag = leaderApplied - n.AppliedIndex
			}
		}
	}
}

// memberStatus is one metaserver node's status, or why it could not be had.
type memberStatus struct {
	admin.Status
	err string
}

func (m memberStatus) MarshalJSON() ([]byte, error) {
	if m.err != "" {
		return json.Marshal(map[string]string{"id": m.ID, "client_addr": m.ClientAddr, "error": m.err})
	}
	return json.Marshal(m.Status)
}

// metaStatus asks every metaserver node for its own status.
func metaStatus(ctx context.Context, a *admin.Client, cl *admin.Cluster) []memberStatus {
	var out []memberStatus
	for _, m := range cl.Meta.Members {
		if m.ClientAddr == "" {
			out = append(out, memberStatus{Status: admin.Status{ID: m.ID, RaftAddr: m.RaftAddr}, err: "client address not yet recorded"})
			continue
		}
		s, err := a.Status(ctx, m.ClientAddr)
		if err != nil {
			out = append(out, memberStatus{Status: admin.Status{ID: m.ID, ClientAddr: m.ClientAddr, RaftAddr: m.RaftAddr}, err: err.Error()})
			continue
		}
		out = append(out, memberStatus{Status: *s})
	}
	return out
}

var groupFlag = &cli.StringFlag{Name: "group", Required: true, Usage: "the broker group's `NAME` (not a consumer group), or meta for the metaserver group"}

func joinCommand() *cli.Command {
	return &cli.Command{
		Name:  "join",
		Usage: "add a node to a broker group or to the metaserver group (through its leader)",
		Description: "Start the new node first (qmqd broker|meta … without --bootstrap), then join it:\n" +
			"  qmqctl --server META join --group NAME --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"The group's members are found through the metaserver (--group meta for the metaserver\n" +
			"group itself). Joining a node that is already a member with the same addresses succeeds.",
		Flags: []cli.Flag{
			groupFlag,
			&cli.StringFlag{Name: "id", Required: true, Usage: "the new node's `ID`"},
			&cli.StringFlag{Name: "raft", Required: true, Usage: "the new node's Raft `HOST:PORT`"},
			&cli.StringFlag{Name: "addr", Required: true, Usage: "the new node's client `HOST:PORT`"},
		},
		Action: func(c *cli.Context) error {
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.Join(ctx, c.String("group"), c.String("id"), c.String("raft"), c.String("addr")); err != nil {
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
		Usage: "remove a node from a broker group or the metaserver group (through its leader)",
		Description: "Stop the node's process first, then run this: it removes the node from the group's Raft\n" +
			"configuration and, for a broker node, from the metaserver. (A removed node left running\n" +
			"may not learn of its removal, and would register with the metaserver again.) It asks\n" +
			"first, or goes ahead with --yes.",
		Flags: []cli.Flag{
			groupFlag,
			&cli.StringFlag{Name: "id", Required: true, Usage: "the `ID` of the node to remove"},
			yesFlag,
		},
		Action: func(c *cli.Context) error {
			if err := confirm(c, fmt.Sprintf("removing node %s from group %s takes its copy of the group's data and its vote out of the group; "+
				"to come back it must be wiped and joined again", c.String("id"), c.String("group"))); err != nil {
				return err
			}
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.Leave(ctx, c.String("group"), c.String("id")); err != nil {
					return err
				}
				fmt.Printf("node %s left group %s\n", c.String("id"), c.String("group"))
				return nil
			})
		},
	}
}
