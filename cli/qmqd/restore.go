package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/backup"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/transport"
)

// restoreCommand seeds a new node's data directory from a backup file
// (qmqctl backup), which it verifies whole first.
func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "seed a new one-node group in a data directory from a backup file (qmqctl backup)",
		Description: "Reads the backup file (--from) whole and checks every checksum in it: a corrupt file is\n" +
			"refused with the byte offset and the chunk where it is corrupt, and nothing is written.\n" +
			"Then it builds the data directory (--data: absent or empty, a mount point say; it is built\n" +
			"inside it and moved up) of a group whose only voter is --id at --raft-advertise (else --raft),\n" +
			"holding the backup's snapshot, which it checks as the state machine will read it (a snapshot\n" +
			"that would not restore is refused, naming the byte of its stream and the file). The group\n" +
			"keeps its name (--broker-group, if given, must be it). Start the node as usual, with that\n" +
			"data directory, id and Raft address:\n" +
			"  qmqd broker --broker-group NAME --id ID --data DIR --raft HOST:PORT --listen … [--meta …]\n" +
			"  qmqd meta --id ID --data DIR --raft HOST:PORT --listen …      (a backup of the metaserver)\n" +
			"without --bootstrap; it elects itself, and others join it with `qmqctl join`.\n" +
			"docs/operations.md, \"Backup and restore\", has the procedure.\n\n" +
			"Exit status: 0 restored; 1 refused or failed (it says why; the data directory is as it was).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Required: true, Usage: "the backup `FILE` (qmqctl backup --out)"},
			&cli.StringFlag{Name: "data", Aliases: []string{"data-dir"}, Required: true, Usage: "the new node's data `DIR`: absent or empty"},
			&cli.StringFlag{Name: "id", Required: true, Usage: "the new node's `ID`, the group's only voter"},
			&cli.StringFlag{Name: "raft", Required: true, Usage: "the Raft `HOST:PORT` the node will start with (its --raft)"},
			&cli.StringFlag{Name: "raft-advertise", Usage: "the Raft `HOST:PORT` the node will advertise (its --raft-advertise), if not --raft"},
			&cli.StringFlag{Name: "broker-group", Aliases: []string{"group"},
				Usage: "the `NAME` the backup must be of (a broker group, or meta): a check, a restored group keeps its name"},
		},
		Action: func(c *cli.Context) error {
			logger, err := newLogger(c)
			if err != nil {
				return err
			}
			addr := c.String("raft")
			if a := c.String("raft-advertise"); a != "" {
				addr = a
			}
			start := time.Now()
			h, err := server.Restore(server.RestoreConfig{From: c.String("from"), DataDir: c.String("data"), ID: c.String("id"),
				RaftAddr: addr, Group: c.String("broker-group"), Logger: logger})
			if err != nil {
				return err
			}
			startCmd := "qmqd broker --broker-group " + h.Group
			if h.Kind == transport.BackupMeta {
				startCmd = "qmqd meta"
			}
			fmt.Fprintf(os.Stderr, "qmqd: restored %s group %s (snapshot %s: index %d, term %d, %d bytes) into %s in %s, "+
				"node %s at %s its only voter; start it with\n  %s --id %s --data %s --raft %s --listen …\n",
				backup.KindName(h.Kind), h.Group, h.SnapshotID, h.Index, h.Term, h.Size, c.String("data"),
				time.Since(start).Round(time.Millisecond), c.String("id"), addr, startCmd, c.String("id"), c.String("data"), c.String("raft"))
			return nil
		},
	}
}
