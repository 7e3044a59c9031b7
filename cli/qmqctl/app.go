package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

// The application registry: `app create`, `update`, `list`, `rotate`,
// `delete`.

// appRightsHelp explains the rights flags of create and update.
const appRightsHelp = "Rights are patterns of names: \"orders\" is that subject (or consumer group) only,\n" +
	"\"orders.*\" every name starting with \"orders.\" (orders.paid, orders.eu.new), \"*\" every\n" +
	"name. --send PATTERN lets the application send to the subjects matching it; --consume\n" +
	"SUBJECT/GROUP lets it consume the subjects matching SUBJECT as the consumer groups matching\n" +
	"GROUP ('/' separates them: names never contain one). Repeat either flag (or separate\n" +
	"patterns with commas); an application has at most 32 rules. --admin lets it do everything,\n" +
	"administration included, whatever its rules. --max-subjects and --max-groups bound the\n" +
	"subjects (routes made on a first send or consume) and consumer groups it may create\n" +
	"(0: 1,000 each); --max-consumers its consumers registered at once in each broker group\n" +
	"(0: 1,024) and --max-delayed its delayed messages pending in each broker group (0: 2,000,000)."

// appFlags are create's and update's flags.
func appFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "admin", Usage: "the application may do everything"},
		&cli.StringSliceFlag{Name: "send", Usage: "a subject `PATTERN` the application may send to (repeatable)"},
		&cli.StringSliceFlag{Name: "consume", Usage: "`SUBJECT/GROUP` patterns: the application may consume those subjects as those consumer groups (repeatable)"},
		&cli.IntFlag{Name: "max-subjects", Usage: "the most subjects the application may create: `N` (0 for the default, 1000)"},
		&cli.IntFlag{Name: "max-groups", Usage: "the most consumer groups the application may create: `N` (0 for the default, 1000)"},
		&cli.IntFlag{Name: "max-consumers", Usage: "the most consumers the application may have registered at once in a broker group: `N` (0 for the default, 1024; at most 16384)"},
		&cli.IntFlag{Name: "max-delayed", Usage: "the most delayed messages the application may have pending in a broker group: `N` (0 for the default, 2000000)"},
	}
}

// secretOutFlag writes a new secret to a file instead of printing it.
var secretOutFlag = &cli.StringFlag{Name: "secret-out",
	Usage: "write the secret to `FILE` (created with mode 0600; an existing file is not overwritten) instead of printing it; " +
		"give it to qmqctl --secret-file or read it into the application"}

func appCommand() *cli.Command {
	return &cli.Command{
		Name:  "app",
		Usage: "applications and their secrets: create, update, list, rotate, delete",
		Description: "An application (QMQ's app code) is what a client connects as: a CODE, a secret the\n" +
			"metaserver makes (shown once, when it is made) and the rights below. The metaserver\n" +
			"keeps only a hash of each secret.\n\n" + appRightsHelp,
		Subcommands: []*cli.Command{{
			Name:            "create",
			Usage:           "create an application and print its secret (the only time it is shown)",
			ArgsUsage:       "CODE",
			Description:     appRightsHelp,
			Flags:           append(appFlags(), secretOutFlag),
			SkipFlagParsing: true,
			Action: withArg("the application's CODE", func(c *cli.Context, code string) error {
				spec, err := appSpec(c, code)
				if err != nil {
					return err
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					secret, err := a.CreateApp(ctx, spec)
					if err != nil {
						return err
					}
					return giveSecret(c, code, secret, "created")
				})
			}),
		}, {
			Name:      "update",
			Usage:     "replace an application's rights and limits (its secret stays)",
			ArgsUsage: "CODE",
			Description: "Replaces every right and limit with those given: a right not given again is taken away,\n" +
				"a limit not given is the default again. Lowering a limit below what the application has\n" +
				"created removes nothing; it creates no more until below it.\n\n" + appRightsHelp,
			Flags:           appFlags(),
			SkipFlagParsing: true,
			Action: withArg("the application's CODE", func(c *cli.Context, code string) error {
				spec, err := appSpec(c, code)
				if err != nil {
					return err
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					if err := a.UpdateApp(ctx, spec); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "application %s updated\n", code)
					return nil
				})
			}),
		}, {
			Name:  "list",
			Usage: "list the applications: their rights, limits, what they created and their secrets' state",
			Description: "SUBJECTS and CONSUMER-GROUPS are what the application created of its limit. SECRETS is 1, or 2\n" +
				"after a rotation whose old secret still works (until the time shown). No secret, nor\n" +
				"anything that verifies one, is ever listed.",
			Flags: []cli.Flag{jsonFlag},
			Action: func(c *cli.Context) error {
				return withAdmin(c, 10*time.Second, func(ctx context.Context, a *admin.Client) error {
					apps, err := a.Apps(ctx)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSONTo(c.App.Writer, apps)
					}
					return printApps(c.App.Writer, apps, time.Now())
				})
			},
		}, {
			Name:      "rotate",
			Usage:     "give an application a new secret and print it; the old one works for --grace",
			ArgsUsage: "CODE",
			Description: "The old secret keeps working for --grace (0s: it stops at once), so that the application's\n" +
				"instances can move to the new one; a secret replaced before it stops at once. --grace is\n" +
				"at most 720h (30 days).",
			Flags: []cli.Flag{
				&cli.DurationFlag{Name: "grace", Value: time.Hour, Usage: "how long the old secret keeps working (`DURATION`)"},
				secretOutFlag,
			},
			SkipFlagParsing: true,
			Action: withArg("the application's CODE", func(c *cli.Context, code string) error {
				grace := c.Duration("grace")
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					secret, err := a.RotateApp(ctx, code, grace)
					if err != nil {
						return err
					}
					if err := giveSecret(c, code, secret, "has a new secret"); err != nil {
						return err
					}
					if grace > 0 {
						fmt.Fprintf(c.App.Writer, "The old secret works until %s.\n", time.Now().Add(grace).Format(time.RFC3339))
					} else {
						fmt.Fprintln(c.App.Writer, "The old secret no longer works.")
					}
					return nil
				})
			}),
		}, {
			Name:            "delete",
			Usage:           "delete an application: its secrets stop working at once",
			ArgsUsage:       "CODE",
			Description:     "The subjects and consumer groups it created stay. Deleting an unknown application succeeds.\nIt asks first, or goes ahead with --yes.",
			SkipFlagParsing: true,
			Flags:           []cli.Flag{yesFlag},
			Action: withArg("the application's CODE", func(c *cli.Context, code string) error {
				if err := confirm(c, fmt.Sprintf("deleting application %s makes its secrets stop working at once: its clients are refused from their next request", code)); err != nil {
					return err
				}
				return withAdmin(c, 30*time.Second, func(ctx context.Context, a *admin.Client) error {
					if err := a.DeleteApp(ctx, code); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "application %s deleted\n", code)
					return nil
				})
			}),
		}},
	}
}

// appSpec reads create's and update's flags.
func appSpec(c *cli.Context, code string) (admin.AppSpec, error) {
	spec := admin.AppSpec{Code: code, Admin: c.Bool("admin"), Send: c.StringSlice("send"),
		MaxSubjects: c.Int("max-subjects"), MaxConsumerGroups: c.Int("max-groups"), MaxConsumers: c.Int("max-consumers"), MaxDelayed: c.Int("max-delayed")}
	for _, g := range c.StringSlice("consume") {
		subject, group, ok := strings.Cut(g, "/")
		if !ok || subject == "" || group == "" || strings.Contains(group, "/") {
			return spec, cmdline.Usagef(c, "--consume %q: want SUBJECT/GROUP, two patterns separated by one '/'", g)
		}
		spec.Consume = append(spec.Consume, admin.ConsumeGrant{Subject: subject, ConsumerGroup: group})
	}
	return spec, nil
}

// giveSecret writes a new secret to --secret-out, or prints it on a line
// of its own, and says how to use it.
func giveSecret(c *cli.Context, code, secret, what string) error {
	w := c.App.Writer
	if out := c.String("secret-out"); out != "" {
		if err := writeSecret(out, secret); err != nil {
			// The secret exists now and is shown nowhere else: print it
			// rather than lose it.
			fmt.Fprintf(w, "Application %s %s, but its secret could not be written (%v). Its secret, shown this once:\n%s\n",
				code, what, err, secret)
			return fmt.Errorf("--secret-out: %w", err)
		}
		fmt.Fprintf(w, "Application %s %s. Its secret is in %s (mode 0600), and shown nowhere else.\n", code, what, out)
		fmt.Fprintf(w, "Connect as it with `qmqctl --app %s --secret-file %s`, or qmq.WithApp from Go.\n", code, out)
		return nil
	}
	fmt.Fprintf(w, "Application %s %s. Its secret, shown this once (keep it safe):\n%s\n", code, what, secret)
	fmt.Fprintf(w, "Connect as it with `qmqctl --app %s --secret-file FILE` (or QMQ_APP with QMQ_SECRET_FILE or\n"+
		"QMQ_SECRET in the environment), or qmq.WithApp from Go.\n", code)
	return nil
}

// writeSecret creates path, readable by its owner only, holding secret.
func writeSecret(path, secret string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printApps prints the applications as a table.
func printApps(w io.Writer, apps []admin.AppInfo, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tADMIN\tSEND\tCONSUME\tSUBJECTS\tCONSUMER-GROUPS\tCONSUMERS\tDELAYED\tSECRETS")
	for _, a := range apps {
		isAdmin := "-"
		if a.Admin {
			isAdmin = "yes"
		}
		var consume []string
		for _, g := range a.Consume {
			consume = append(consume, g.Subject+"/"+g.ConsumerGroup)
		}
		secrets := "1"
		if a.Secrets > 1 {
			secrets = fmt.Sprintf("%d (old one until %s)", a.Secrets, a.OldSecretExpires.Format(time.RFC3339))
			if !a.OldSecretExpires.After(now) {
				secrets = fmt.Sprintf("%d (old one expired)", a.Secrets)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d/%d\t%d\t%d\t%s\n", a.Code, isAdmin, orDash(strings.Join(a.Send, ",")),
			orDash(strings.Join(consume, ",")), a.Subjects, a.MaxSubjects, a.ConsumerGroups, a.MaxConsumerGroups, a.MaxConsumers, a.MaxDelayed, secrets)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", plural(len(apps), "application"))
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
