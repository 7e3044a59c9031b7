package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/transport"
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

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the metaserver group and every broker group: members, leader, term, applied index and lag",
		Description: "Asks the metaserver (through --server) for every broker group, and each node for its own\n" +
			"position. LAG is how many entries a node's applied index trails its leader's; BACKLOG is\n" +
			"how many deliveries its consumer groups still owe. A node that answers shows what it says\n" +
			"now; SEEN is how long ago the metaserver last heard from it. A node that does not answer\n" +
			"within a second is DOWN (its other figures are the metaserver's last). TLS is on, off\n" +
			"(plaintext on loopback only) or INSECURE! (open to anyone on an address other hosts can\n" +
			"reach, allowed by qmqd --insecure). Below the tables: each DOWN node, each broker group (or\n" +
			"the metaserver group) with no leader, each node that serves no client (its --auth and its\n" +
			"metaserver's differ), and each broker group's configuration, as its leader holds it (see\n" +
			"config show).\n\n" +
			"With --check it exits 1 when a node is DOWN or a broker group or the metaserver group has no\n" +
			"leader (saying which on stderr), for scripts and health checks; it exits 1 too when the\n" +
			"cluster cannot be reached.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print the cluster view as JSON (with \"problems\": what --check checks)"},
			&cli.BoolFlag{Name: "check", Usage: "exit 1 if a node is DOWN, or a broker group or the metaserver group has no leader"},
		},
		Action: func(c *cli.Context) error {
			return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
				cl, err := a.Cluster(ctx)
				if err != nil {
					return err
				}
				metas := metaStatus(ctx, a, cl)
				down := probeBrokers(ctx, a, cl)
				problems := clusterProblems(metas, cl, down)
				configs := brokerConfigsOf(ctx, a, cl)
				if c.Bool("json") {
					if problems == nil {
						problems = []string{}
					}
					if err := printJSONTo(c.App.Writer, struct {
						Meta []memberStatus `json:"meta"`
						*admin.Cluster
						BrokerConfigs []admin.BrokerGroupConfig `json:"broker_configs"`
						Problems      []string                  `json:"problems"`
					}{metas, cl, configs, problems}); err != nil {
						return err
					}
				} else {
					if err := printStatusTable(c.App.Writer, metas, cl, down); err != nil {
						return err
					}
					for _, p := range problems {
						fmt.Fprintln(c.App.Writer, p)
					}
					if err := printConfigTable(c.App.Writer, cl, configs); err != nil {
						return err
					}
				}
				if c.Bool("check") && len(problems) > 0 {
					fmt.Fprintf(c.App.ErrWriter, "qmqctl status: %s: %s\n", plural(len(problems), "problem"), strings.Join(problems, "; "))
					return errFailed
				}
				return nil
			})
		},
	}
}

// stateDown is the state of a node that did not answer.
const stateDown = "DOWN"

// probeTimeout bounds how long status waits for one node's answer.
const probeTimeout = time.Second

// probeBrokers asks every broker node of cl for its status at once, puts
// what those that answer say in its place in cl (the metaserver's figures
// are from their last heartbeat), and marks DOWN those that do not
// answer; it returns why each DOWN node did not, by node ID within its
// group.
func probeBrokers(ctx context.Context, a *admin.Client, cl *admin.Cluster) map[[2]string]string {
	type answer struct {
		st  *admin.Status
		err error
	}
	answers := make([][]answer, len(cl.BrokerGroups))
	var wg sync.WaitGroup
	for gi := range cl.BrokerGroups {
		answers[gi] = make([]answer, len(cl.BrokerGroups[gi].Nodes))
		for ni, n := range cl.BrokerGroups[gi].Nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if n.ClientAddr == "" {
					answers[gi][ni].err = errors.New("no client address recorded")
					return
				}
				sctx, cancel := context.WithTimeout(ctx, probeTimeout)
				defer cancel()
				st, err := a.Status(sctx, n.ClientAddr)
				answers[gi][ni] = answer{st, err}
			}()
		}
	}
	wg.Wait()
	down := map[[2]string]string{}
	for gi := range cl.BrokerGroups {
		g := &cl.BrokerGroups[gi]
		var leaderApplied uint64
		for ni := range g.Nodes {
			n, ans := &g.Nodes[ni], answers[gi][ni]
			if ans.err != nil {
				n.State = stateDown
				down[[2]string{g.Name, n.ID}] = downReason(n.ClientAddr, ans.err)
				continue
			}
			st := ans.st
			n.State, n.Term, n.AppliedIndex, n.Backlog = st.State, st.Term, st.AppliedIndex, st.Backlog
			n.TLS, n.Insecure, n.Refusing = st.TLS, st.Insecure, st.Refusing
			if n.SeenMillis < 0 {
				n.SeenMillis = 0 // it answered now
			}
			if n.State == "Leader" {
				leaderApplied = n.AppliedIndex
			}
		}
		for ni := range g.Nodes {
			n := &g.Nodes[ni]
			n.Lag = 0
			if n.State != stateDown && n.State != "Unknown" && leaderApplied > n.AppliedIndex {
				n.Lag = leaderApplied - n.AppliedIndex
			}
		}
	}
	return down
}

// downReason says why the node at addr did not answer status's probe.
func downReason(addr string, err error) string {
	msg := plain(err).Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "i/o timeout"):
		return fmt.Sprintf("no answer from %s within %s", addr, probeTimeout)
	case strings.Contains(msg, "connection refused"):
		return fmt.Sprintf("cannot reach %s: connection refused", addr)
	}
	return msg
}

// clusterProblems are what status --check fails on: each node DOWN, each
// group with no leader, in the order status prints them.
func clusterProblems(metas []memberStatus, cl *admin.Cluster, down map[[2]string]string) []string {
	var out []string
	metaLeader := false
	for _, m := range metas {
		if m.err != "" {
			out = append(out, fmt.Sprintf("DOWN: node %s of the metaserver group: %s", m.ID, m.err))
		} else if m.State == "Leader" {
			metaLeader = true
		}
	}
	if len(metas) > 0 && !metaLeader {
		out = append(out, "NO LEADER: the metaserver group has no leader")
	}
	for _, g := range cl.BrokerGroups {
		leader := false
		for _, n := range g.Nodes {
			if why, ok := down[[2]string{g.Name, n.ID}]; ok {
				out = append(out, fmt.Sprintf("DOWN: node %s of broker group %s: %s", n.ID, g.Name, why))
			}
			leader = leader || n.State == "Leader"
		}
		if !leader {
			out = append(out, fmt.Sprintf("NO LEADER: broker group %s has no leader", g.Name))
		}
	}
	return out
}

func printStatusTable(out io.Writer, metas []memberStatus, cl *admin.Cluster, down map[[2]string]string) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	const columns = "NODE\tSTATE\tTERM\tAPPLIED\tLAG\tBACKLOG\tSEEN\tTLS\tCLIENT\tRAFT"
	if len(metas) > 0 {
		fmt.Fprintln(w, "METASERVER\t"+columns)
	}
	var leaderApplied uint64
	for _, s := range metas {
		if s.State == "Leader" {
			leaderApplied = s.AppliedIndex
		}
	}
	for _, s := range metas {
		if s.err != "" {
			fmt.Fprintf(w, "meta\t%s\t%s\t\t\t\t\t\t\t%s\t%s\n", s.ID, stateDown, orDash(s.ClientAddr), s.RaftAddr)
			continue
		}
		lag := uint64(0)
		if leaderApplied > s.AppliedIndex {
			lag = leaderApplied - s.AppliedIndex
		}
		fmt.Fprintf(w, "meta\t%s\t%s\t%d\t%d\t%d\t-\tnow\t%s\t%s\t%s\n", s.ID, s.State, s.Term, s.AppliedIndex, lag,
			security(s.TLS, s.Insecure), s.ClientAddr, s.RaftAddr)
	}
	if len(metas) > 0 && len(cl.BrokerGroups) > 0 {
		fmt.Fprintln(w)
	}
	if len(cl.BrokerGroups) > 0 {
		fmt.Fprintln(w, "BROKER-GROUP\t"+columns)
	}
	for _, g := range cl.BrokerGroups {
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
			sec := "-" // neither a heartbeat nor an answer
			if n.SeenMillis >= 0 {
				sec = security(n.TLS, n.Insecure)
			}
			if _, isDown := down[[2]string{g.Name, n.ID}]; isDown {
				fmt.Fprintf(w, "%s\t%s\t%s\t\t\t\t\t%s\t%s\t%s\t%s\n", name, n.ID, stateDown, seen, sec, n.ClientAddr, n.RaftAddr)
				continue
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", name, n.ID, n.State, n.Term, n.AppliedIndex, n.Lag, n.Backlog, seen,
				sec, n.ClientAddr, n.RaftAddr)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, g := range cl.BrokerGroups {
		for _, n := range g.Nodes {
			if n.Refusing != "" {
				fmt.Fprintf(out, "node %s of broker group %s REFUSES CLIENTS: %s\n", n.ID, g.Name, n.Refusing)
			}
		}
	}
	fmt.Fprintf(out, "%s, %s\n", plural(len(cl.BrokerGroups), "broker group"), plural(cl.Subjects, "subject"))
	return nil
}

// brokerConfigsOf asks each broker group of cl for its configuration, its
// leader first; a group none of whose nodes answer has none in the list.
func brokerConfigsOf(ctx context.Context, a *admin.Client, cl *admin.Cluster) []admin.BrokerGroupConfig {
	var out []admin.BrokerGroupConfig
	for _, g := range cl.BrokerGroups {
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
	if len(cl.BrokerGroups) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprint(w, "\nBROKER-GROUP")
	for _, col := range brokerConfigColumns {
		fmt.Fprint(w, "\t", strings.ToUpper(col.name))
	}
	fmt.Fprintln(w)
	for _, g := range cl.BrokerGroups {
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

// memberStatus is one metaserver node's status, or why it could not be had.
type memberStatus struct {
	admin.Status
	err string
}

func (m memberStatus) MarshalJSON() ([]byte, error) {
	if m.err != "" {
		return json.Marshal(map[string]string{"id": m.ID, "client_addr": m.ClientAddr, "raft_addr": m.RaftAddr,
			"state": stateDown, "error": m.err})
	}
	return json.Marshal(m.Status)
}

// metaStatus asks every metaserver node for its own status, all at once.
func metaStatus(ctx context.Context, a *admin.Client, cl *admin.Cluster) []memberStatus {
	out := make([]memberStatus, len(cl.Meta.Members))
	var wg sync.WaitGroup
	for i, m := range cl.Meta.Members {
		if m.ClientAddr == "" {
			out[i] = memberStatus{Status: admin.Status{ID: m.ID, RaftAddr: m.RaftAddr}, err: "client address not yet recorded"}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			s, err := a.Status(sctx, m.ClientAddr)
			if err != nil {
				out[i] = memberStatus{Status: admin.Status{ID: m.ID, ClientAddr: m.ClientAddr, RaftAddr: m.RaftAddr}, err: downReason(m.ClientAddr, err)}
				return
			}
			out[i] = memberStatus{Status: *s}
		}()
	}
	wg.Wait()
	return out
}

// brokerGroupFlag names the broker group (or the metaserver group) a
// command acts on; --group is its old spelling, kept for scripts.
func brokerGroupFlag() *cli.StringFlag {
	return &cli.StringFlag{Name: "broker-group", Aliases: []string{"group"}, Required: true,
		Usage: "the broker group's `NAME`, or meta for the metaserver group (--group: the old spelling)"}
}

// groupPhrase names a broker group, or the metaserver group, in a sentence.
func groupPhrase(group string) string {
	if group == admin.MetaGroup {
		return "the metaserver group"
	}
	return "broker group " + group
}

func joinCommand() *cli.Command {
	return &cli.Command{
		Name:  "join",
		Usage: "add a node to a broker group or to the metaserver group (through its leader)",
		Description: "Start the new node first (qmqd broker|meta … without --bootstrap), then join it:\n" +
			"  qmqctl --server META join --broker-group NAME --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"The group's members are found through the metaserver (--broker-group meta for the\n" +
			"metaserver group itself). Joining a node that is already a member with the same addresses\n" +
			"succeeds.",
		Flags: []cli.Flag{
			brokerGroupFlag(),
			&cli.StringFlag{Name: "id", Required: true, Usage: "the new node's `ID`"},
			&cli.StringFlag{Name: "raft", Required: true, Usage: "the new node's Raft `HOST:PORT`"},
			&cli.StringFlag{Name: "addr", Required: true, Usage: "the new node's client `HOST:PORT`"},
		},
		Action: func(c *cli.Context) error {
			group := c.String("broker-group")
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.Join(ctx, group, c.String("id"), c.String("raft"), c.String("addr")); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "node %s joined %s\n", c.String("id"), groupPhrase(group))
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
			"may not learn of its removal, and would register with the metaserver again.) A node that\n" +
			"is not a member of the group's configuration (as a node of the group that answers holds\n" +
			"it) is refused, naming the members. It asks first, or goes ahead with --yes.",
		Flags: []cli.Flag{
			brokerGroupFlag(),
			&cli.StringFlag{Name: "id", Required: true, Usage: "the `ID` of the node to remove"},
			yesFlag,
		},
		Action: func(c *cli.Context) error {
			group, id := c.String("broker-group"), c.String("id")
			err := withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
				ids, err := groupMembers(ctx, a, group)
				if err != nil {
					return err
				}
				if !slices.Contains(ids, id) {
					return fmt.Errorf("node %s is not a member of %s (its members: %s): nothing was done", id, groupPhrase(group), strings.Join(ids, ", "))
				}
				return nil
			})
			if err != nil {
				return err
			}
			if err := confirm(c, fmt.Sprintf("removing node %s from %s takes its copy of the group's data and its vote out of the group; "+
				"to come back it must be wiped and joined again", id, groupPhrase(group))); err != nil {
				return err
			}
			return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
				if err := a.Leave(ctx, group, id); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "node %s left %s\n", id, groupPhrase(group))
				return nil
			})
		},
	}
}

// groupMembers returns the IDs of the Raft configuration of group (a
// broker group, or the metaserver group), as the metaserver leader holds
// it or, for a broker group, as the first of its nodes to answer holds it
// (its leader first).
func groupMembers(ctx context.Context, a *admin.Client, group string) ([]string, error) {
	cl, err := a.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	if group == admin.MetaGroup {
		if cl.Meta.ID == "" {
			return nil, fmt.Errorf("%s answers without a metaserver: there is no metaserver group", c0(a))
		}
		return memberIDs(cl.Meta.Members), nil
	}
	var names []string
	for _, g := range cl.BrokerGroups {
		names = append(names, g.Name)
		if g.Name != group {
			continue
		}
		nodes := slices.Clone(g.Nodes) // the leader first
		for i := range nodes {
			if nodes[i].ID == g.Leader {
				nodes[0], nodes[i] = nodes[i], nodes[0]
			}
		}
		var errs []error
		for _, n := range nodes {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := a.Status(sctx, n.ClientAddr)
			cancel()
			if err == nil && len(st.Members) > 0 {
				return memberIDs(st.Members), nil
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.ID, plain(err)))
			}
		}
		return nil, fmt.Errorf("no node of broker group %s answered, so its members cannot be checked: %w", group, errors.Join(errs...))
	}
	return nil, fmt.Errorf("no broker group %s (the broker groups: %s)", group, orNone(strings.Join(names, ", ")))
}

// c0 names the first server qmqctl asks.
func c0(a *admin.Client) string {
	if s := a.Servers(); len(s) > 0 {
		return s[0]
	}
	return "the server"
}

func memberIDs(members []transport.Member) []string {
	var ids []string
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	return ids
}
