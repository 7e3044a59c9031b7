package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/backup"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "write a consistent snapshot of a broker group's whole state, or the metaserver's, to a file",
		Description: "Asks the group's leader for a Raft snapshot of its state, taken for the backup while the\n" +
			"group serves: a broker group's messages, consume and pull logs, consumer groups, dead\n" +
			"letters, delayed messages and dedup window; the metaserver's (--meta) broker groups,\n" +
			"routes, applications and broker configurations. It holds what was applied up to the\n" +
			"snapshot's Raft index, which it prints; a send acknowledged after it is not in it.\n" +
			"The snapshot comes in chunks of at most 1 MiB, each checksummed, into FILE.partial, which\n" +
			"is fsynced and renamed to FILE once whole. Run again with the same --out after an\n" +
			"interruption, it continues FILE.partial where it stopped if the leader still holds that\n" +
			"snapshot, else starts over from a new one, saying so. A node holds at most --max-backups\n" +
			"snapshots open for backups (RESOURCE_EXHAUSTED beyond), each until --backup-idle-timeout\n" +
			"after its last request. Restore with `qmqd restore --from FILE`; docs/operations.md,\n" +
			"\"Backup and restore\", has the procedure.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "broker-group", Aliases: []string{"group"}, Usage: "the broker group's `NAME`"},
			&cli.BoolFlag{Name: "meta", Usage: "the metaserver group"},
			&cli.StringFlag{Name: "out", Required: true, Usage: "the backup `FILE` (FILE.partial while it is written)"},
			&cli.DurationFlag{Name: "timeout", Usage: "give up after `DUR` (0: never; the partial file is kept, to continue)"},
			// A test's interruption: stop after N chunks, leaving FILE.partial.
			&cli.IntFlag{Name: "stop-after-chunks", Hidden: true},
			&cli.IntFlag{Name: "chunk-size", Hidden: true},
		},
		Action: func(c *cli.Context) error {
			group := c.String("broker-group")
			if c.Bool("meta") {
				if group != "" && group != admin.MetaGroup {
					return cmdline.Usagef(c, "give --broker-group NAME or --meta, not both")
				}
				group = admin.MetaGroup
			}
			if group == "" {
				return cmdline.Usagef(c, "give --broker-group NAME or --meta")
			}
			if c.Duration("timeout") < 0 {
				return cmdline.Usagef(c, "--timeout %s: 0 (never) or more", c.Duration("timeout"))
			}
			ctx, stop := signalContext()
			defer stop()
			a, err := admin.New(c.String("server"), connOption(c))
			if err != nil {
				return err
			}
			defer a.Close()
			if d := c.Duration("timeout"); d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			src, err := a.BackupSource(ctx, group)
			if err != nil {
				return err
			}
			defer src.Close()
			out := c.String("out")
			start := time.Now()
			got, err := backup.Fetch(ctx, src, group, out, backup.FetchOptions{Max: c.Int("chunk-size"), StopAfter: c.Int("stop-after-chunks"),
				Say: func(format string, args ...any) { fmt.Fprintf(c.App.ErrWriter, "qmqctl: "+format+"\n", args...) }})
			if err != nil {
				if e := interruption(ctx); e != nil {
					fmt.Fprintf(c.App.ErrWriter, "qmqctl: stopped; %s%s is kept: run again to continue it\n", out, backup.PartialSuffix)
					return e
				}
				if _, serr := os.Stat(out + backup.PartialSuffix); serr == nil && !errors.Is(err, backup.ErrStopped) {
					return fmt.Errorf("%w (%s%s is kept: run again to continue it)", err, out, backup.PartialSuffix)
				}
				return err
			}
			h := got.Header
			resumed := ""
			if got.ResumedAt > 0 {
				resumed = fmt.Sprintf(", continued from byte %d", got.ResumedAt)
			}
			fmt.Fprintf(c.App.Writer, "backup of %s group %s: snapshot %s (index %d, term %d), %d bytes in %s%s: %s\n",
				backup.KindName(h.Kind), h.Group, h.SnapshotID, h.Index, h.Term, h.Size, time.Since(start).Round(time.Millisecond), resumed, out)
			return nil
		},
	}
}
