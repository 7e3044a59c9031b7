package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/limits"
)

// config show and config set: a broker group's configuration, which every
// node of the group applies by.
func configCommand() *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "show or change a broker group's configuration: retention, dedup window, pull and unacked bounds, segment sizes",
		Description: "The broker group configuration is replicated: every node of a BROKER group applies by the\n" +
			"same values, whatever flags it was started with (qmqd's --retention-age, --dedup-window and\n" +
			"the like only seed a new group, through its first leader). It is not a consumer group's\n" +
			"settings: those are consumer-group set's.",
		Subcommands: []*cli.Command{
			{
				Name:  "show",
				Usage: "show a broker group's configuration as each of its nodes holds it, its leader's first",
				Flags: []cli.Flag{brokerGroupFlag(), &cli.BoolFlag{Name: "json", Usage: "print each node's answer as JSON"}},
				Action: func(c *cli.Context) error {
					return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
						configs, err := a.BrokerGroupConfigs(ctx, c.String("broker-group"))
						if len(configs) > 0 {
							var perr error
							if c.Bool("json") {
								perr = printJSONTo(c.App.Writer, configs)
							} else {
								perr = printBrokerConfigs(c.App.Writer, configs)
							}
							if perr != nil {
								return perr
							}
						}
						return err
					})
				},
			},
			{
				Name:  "set",
				Usage: "change settings of a broker group's configuration, on every node of the group",
				Description: "Only the settings given change. The leader checks the result before proposing it and every\n" +
					"node again as it applies it, so a refused change changes nothing anywhere. Each takes\n" +
					"effect at the same entry on every node: retention at the next send applied, the pull and\n" +
					"unacked bounds at the next pull, a dedup window at once (a shorter one forgets what it no\n" +
					"longer covers; a longer one cannot recall what was already forgotten), segment sizes from\n" +
					"each log's next record (a segment already past a smaller size is sealed by it).",
				Flags: append([]cli.Flag{brokerGroupFlag(), &cli.BoolFlag{Name: "json", Usage: "print the leader's answer as JSON"}}, configFlags()...),
				Action: func(c *cli.Context) error {
					ch, err := configChangesFromFlags(c)
					if err != nil {
						return cmdline.Usagef(c, "%v", err)
					}
					return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
						got, err := a.SetBrokerGroupConfig(ctx, c.String("broker-group"), ch)
						if err != nil {
							return err
						}
						if c.Bool("json") {
							return printJSONTo(c.App.Writer, got)
						}
						fmt.Fprintf(c.App.Writer, "broker group %s: configuration set at entry %d\n", got.BrokerGroup, got.Config.Index)
						return printBrokerConfigs(c.App.Writer, []admin.BrokerGroupConfig{*got})
					})
				},
			},
		},
	}
}

// configFlags are config set's settings, checked against the bounds of
// internal/limits before anything is sent.
func configFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retention-age", DefaultText: "unchanged",
			Usage: fmt.Sprintf("remove messages older than `DUR`, a whole segment at a time (0: no age bound; else at least the dedup window, at most %s)", shortDuration(limits.MaxRetentionAge))},
		&cli.Int64Flag{Name: "retention-size", DefaultText: "unchanged",
			Usage: "remove the oldest segments while the message log holds more than `MIB` MiB (0: no size bound; else at least one segment)"},
		&cli.DurationFlag{Name: "dedup-window", DefaultText: "unchanged",
			Usage: fmt.Sprintf("remember a message id for `DUR`, so that a send retried within it is not stored twice (0 to %s)", shortDuration(limits.MaxDedupWindow))},
		&cli.IntFlag{Name: "max-pull", DefaultText: "unchanged", Usage: fmt.Sprintf("hand out at most `N` messages in one pull (1..%d)", limits.MaxMaxPull)},
		&cli.IntFlag{Name: "max-unacked", DefaultText: "unchanged", Usage: fmt.Sprintf("let one consumer hold at most `N` messages unacked (1..%d)", limits.MaxMaxUnacked)},
		&cli.Int64Flag{Name: "segment-size", DefaultText: "unchanged",
			Usage: fmt.Sprintf("roll the message log's segments at `MIB` MiB (%d..%d)", limits.MinSegmentSize>>20, limits.MaxSegmentSize>>20)},
		&cli.Int64Flag{Name: "index-segment-size", DefaultText: "unchanged",
			Usage: fmt.Sprintf("roll the consume and pull logs' segments at `KIB` KiB (%d..%d)", limits.MinIndexSegmentSize>>10, limits.MaxIndexSegmentSize>>10)},
	}
}

// configChangesFromFlags reads and checks the settings given. Whether the
// values agree with the rest of the configuration (a retention age not
// below the dedup window, a size not below a segment) is checked here when
// both are given, and by the leader in any case.
func configChangesFromFlags(c *cli.Context) (admin.BrokerGroupConfigChanges, error) {
	var ch admin.BrokerGroupConfigChanges
	for _, d := range []struct {
		name string
		to   **time.Duration
		max  time.Duration
	}{{"retention-age", &ch.RetentionAge, limits.MaxRetentionAge}, {"dedup-window", &ch.DedupWindow, limits.MaxDedupWindow}} {
		if !c.IsSet(d.name) {
			continue
		}
		v := c.Duration(d.name)
		if err := checkDuration(d.name, v, 0, d.max, ""); err != nil {
			return ch, err
		}
		*d.to = &v
	}
	for _, n := range []struct {
		name     string
		to       **int
		min, max int
	}{{"max-pull", &ch.MaxPull, 1, limits.MaxMaxPull}, {"max-unacked", &ch.MaxUnacked, 1, limits.MaxMaxUnacked}} {
		if !c.IsSet(n.name) {
			continue
		}
		v := c.Int(n.name)
		if v < n.min || v > n.max {
			return ch, fmt.Errorf("--%s %d: %d..%d", n.name, v, n.min, n.max)
		}
		*n.to = &v
	}
	for _, s := range []struct {
		name     string
		to       **int64
		shift    uint
		unit     string
		min, max int64
	}{
		{"retention-size", &ch.RetentionBytes, 20, "MiB", 0, limits.MaxRetentionBytes >> 20},
		{"segment-size", &ch.SegmentSize, 20, "MiB", limits.MinSegmentSize >> 20, limits.MaxSegmentSize >> 20},
		{"index-segment-size", &ch.IndexSegmentSize, 10, "KiB", limits.MinIndexSegmentSize >> 10, limits.MaxIndexSegmentSize >> 10},
	} {
		if !c.IsSet(s.name) {
			continue
		}
		v := c.Int64(s.name)
		if v < s.min || v > s.max {
			return ch, fmt.Errorf("--%s %d: %d..%d %s", s.name, v, s.min, s.max, s.unit)
		}
		b := v << s.shift
		*s.to = &b
	}
	if ch == (admin.BrokerGroupConfigChanges{}) {
		return ch, errors.New("give at least one setting to change")
	}
	if ch.RetentionAge != nil && ch.DedupWindow != nil && *ch.RetentionAge > 0 && *ch.RetentionAge < *ch.DedupWindow {
		return ch, fmt.Errorf("--retention-age %s is below --dedup-window %s: a send retried after its message was removed would be stored twice", *ch.RetentionAge, *ch.DedupWindow)
	}
	if ch.RetentionBytes != nil && ch.SegmentSize != nil && *ch.RetentionBytes > 0 && *ch.RetentionBytes < *ch.SegmentSize {
		return ch, fmt.Errorf("--retention-size %d MiB is below --segment-size %d MiB", *ch.RetentionBytes>>20, *ch.SegmentSize>>20)
	}
	return ch, nil
}

// printBrokerConfigs prints configurations side by side, a column a node.
func printBrokerConfigs(out io.Writer, configs []admin.BrokerGroupConfig) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(name string, value func(admin.BrokerGroupConfig) string) {
		fmt.Fprint(w, name)
		for _, c := range configs {
			fmt.Fprint(w, "\t", value(c))
		}
		fmt.Fprintln(w)
	}
	row("NODE", func(c admin.BrokerGroupConfig) string { return c.Node })
	for _, s := range brokerConfigColumns {
		row(s.name, s.value)
	}
	row("applied", func(c admin.BrokerGroupConfig) string { return fmt.Sprint(c.AppliedIndex) })
	return w.Flush()
}

// brokerConfigColumns are the settings as config show and status print
// them.
var brokerConfigColumns = []struct {
	name  string
	value func(admin.BrokerGroupConfig) string
}{
	{"retention-age", func(c admin.BrokerGroupConfig) string { return shortDuration(c.Config.RetentionAge) }},
	{"retention-size", func(c admin.BrokerGroupConfig) string { return byteSize(c.Config.RetentionBytes) }},
	{"dedup-window", func(c admin.BrokerGroupConfig) string { return shortDuration(c.Config.DedupWindow) }},
	{"max-pull", func(c admin.BrokerGroupConfig) string { return fmt.Sprint(c.Config.MaxPull) }},
	{"max-unacked", func(c admin.BrokerGroupConfig) string { return fmt.Sprint(c.Config.MaxUnacked) }},
	{"segment-size", func(c admin.BrokerGroupConfig) string { return byteSize(c.Config.SegmentSize) }},
	{"index-segment-size", func(c admin.BrokerGroupConfig) string { return byteSize(c.Config.IndexSegmentSize) }},
	{"source", func(c admin.BrokerGroupConfig) string {
		if c.Config.Source == "broker-group" {
			return fmt.Sprintf("broker-group@%d", c.Config.Index)
		}
		return c.Config.Source
	}},
}

// byteSize writes a byte count in MiB or KiB when it is a whole number of
// them.
func byteSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}
