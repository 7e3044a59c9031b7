// Command qmqd is the queue's server daemon.
//
//	qmqd dev      a complete one-node installation on embedded defaults
//	qmqd meta     one node of the metaserver group (routing, membership)
//	qmqd broker   one node of a broker group (a Raft cluster)
//	qmqd restore  a new one-node group's data directory from a backup file
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/cli/internal/cmdline"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

func main() {
	os.Exit(exitStatus(cmdline.Execute(newApp(), os.Args), os.Stderr))
}

// exitStatus says on stderr how a run that returned err failed, if it
// did, and returns its exit status: 0; 2 for a usage mistake (a flag or
// command that does not exist, a value refused before anything started);
// 1 for the rest.
func exitStatus(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case cmdline.IsUsage(err):
		fmt.Fprintln(stderr, err)
		return cmdline.ExitUsage
	case errors.Is(err, errInvalidFlag):
		fmt.Fprintln(stderr, "qmqd:", err)
		return cmdline.ExitUsage
	}
	fmt.Fprintln(stderr, "qmqd:", err)
	return cmdline.ExitFailure
}

// newApp is qmqd: its flags and commands.
func newApp() *cli.App {
	return &cli.App{
		Name:    "qmqd",
		Version: version.String(),
		Usage:   "the QMQ server daemon",
		Description: "`qmqd dev` starts a complete one-node queue with no other setup. A production cluster is\n" +
			"a metaserver group (`qmqd meta`, three nodes) and broker groups (`qmqd broker --meta …`,\n" +
			"three nodes each): bootstrap the first node of each group with --bootstrap, then add the\n" +
			"others with `qmqctl join`. docs/operations.md walks through it. A node with an address that\n" +
			"is not on loopback starts only with TLS (--tls-cert, --tls-key, --tls-ca) or --insecure.\n" +
			"Global options (--log-level) go before or after the command.\n\n" +
			"On SIGINT or SIGTERM a node that leads its group first hands leadership to another voter\n" +
			"(at most 10 s), then closes.\n\n" +
			"Exit status: 0 stopped by SIGINT or SIGTERM, after closing cleanly; 1 failed (it says why\n" +
			"on stderr); 2 a usage mistake (a flag or command that does not exist, a value out of\n" +
			"bounds): nothing was started.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn or error", EnvVars: []string{"QMQ_LOG_LEVEL"}},
		},
		Commands: []*cli.Command{devCommand(), metaCommand(), brokerCommand(), restoreCommand()},
	}
}

// brokerFlags are the flags of the commands that run a broker.
func brokerFlags() []cli.Flag {
	d := server.DefaultConfig()
	return append([]cli.Flag{
		&cli.DurationFlag{Name: "max-delay", Value: server.DefaultMaxDelay,
			Usage: "refuse delayed messages due more than `DUR` ahead (17544h is two years: 731 days)"},
		&cli.Int64Flag{Name: "min-free-disk", Value: d.MinFreeDisk >> 20,
			Usage: "refuse sends (DISK_FULL) while the data disk has less than `MIB` MiB free; consumers are still served"},
		&cli.Int64Flag{Name: "disk-reserve", Value: d.FSM.DiskReserve >> 20,
			Usage: "a replica waits before applying while its data disk has less than `MIB` MiB free beyond what it is about to write"},
		&cli.IntFlag{Name: "max-open-files", Value: d.FSM.MaxOpenFiles,
			Usage: "keep at most `N` segment files open (at least 16); the process's file limit (ulimit -n) must leave room above it"},
		&cli.StringFlag{Name: "raft-log", Value: string(d.RaftLog),
			Usage: "the Raft log `STORE` of a new data directory: wal (raft-wal, in raft-wal/: one fsync per batch) or bolt " +
				"(raft-boltdb, in raft.db: two); a directory that holds a log keeps its own, so one from before raft-wal stays on raft.db"},
		&cli.Int64Flag{Name: "raft-log-cache", Value: d.RaftLogCache >> 20,
			Usage: "keep the most recent `MIB` MiB of Raft entries in memory, to feed followers without reading them back from the log (0: none)"},
	}, slices.Concat(retentionFlags(), configFlags(), snapshotFlags())...)
}

// maxRaftLogCacheMiB is the largest --raft-log-cache: 1 TiB, far above any
// memory, and far below where its bytes overflow.
const maxRaftLogCacheMiB = 1 << 20

// brokerSettings applies brokerFlags to cfg.
func brokerSettings(c *cli.Context, cfg *server.Config) error {
	cfg.MaxDelay = c.Duration("max-delay")
	cfg.MinFreeDisk, cfg.FSM.DiskReserve = c.Int64("min-free-disk")<<20, c.Int64("disk-reserve")<<20
	cfg.FSM.MaxOpenFiles = c.Int("max-open-files")
	l, err := raftlog.Parse(c.String("raft-log"))
	if err != nil {
		return fmt.Errorf("%w --raft-log %q: wal or bolt", errInvalidFlag, c.String("raft-log"))
	}
	cfg.RaftLog = l
	cache := c.Int64("raft-log-cache")
	if cache < 0 || cache > maxRaftLogCacheMiB {
		return fmt.Errorf("%w --raft-log-cache %d: 0 to %d", errInvalidFlag, cache, maxRaftLogCacheMiB)
	}
	cfg.RaftLogCache = cache << 20
	if err := configSettings(c, cfg); err != nil {
		return err
	}
	if err := snapshotSettings(c, cfg); err != nil {
		return err
	}
	return retentionSettings(c, cfg)
}

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a complete one-node queue on embedded defaults",
		Description: "Starts one metaserver node and one broker node in this process, each bootstrapping its\n" +
			"own group; data survives restarts in --data. Send and consume with `qmqctl send` /\n" +
			"`qmqctl consume` (their default server is this one). With --tls-cert, --tls-key and --tls-ca\n" +
			"both nodes serve TLS with that one node certificate, which must be valid for every host they\n" +
			"listen on (127.0.0.1 by default), and the broker dials the metaserver over TLS;\n" +
			"qmqctl then takes --tls-ca (and --tls-cert and --tls-key: a client certificate, unless\n" +
			"--tls-client-auth is none). Its addresses are on loopback by default; given one that is\n" +
			"not, it needs TLS or --insecure, as meta and broker do.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "data", Value: "qmq-data", Usage: "data `DIR` (broker/ and meta/ inside)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:6222", Usage: "broker client `HOST:PORT`"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:6280", Usage: "broker admin HTTP `HOST:PORT` (/status, /metrics)"},
			&cli.StringFlag{Name: "raft", Value: "127.0.0.1:6223", Usage: "broker Raft `HOST:PORT`"},
			&cli.StringFlag{Name: "meta-listen", Value: "127.0.0.1:6224", Usage: "metaserver client `HOST:PORT`"},
			&cli.StringFlag{Name: "meta-raft", Value: "127.0.0.1:6225", Usage: "metaserver Raft `HOST:PORT`"},
		}, slices.Concat(brokerFlags(), tlsFlags(), authFlags())...),
		Action: func(c *cli.Context) error {
			logger, err := newLogger(c)
			if err != nil {
				return err
			}
			if _, err := os.Stat(filepath.Join(c.String("data"), raftlog.BoltFile)); err == nil {
				return fmt.Errorf("%s holds a broker's data at its top level, from a qmqd dev before the metaserver; "+
					"move it to %s to keep it, or use another --data", c.String("data"), filepath.Join(c.String("data"), "broker"))
			}
			cfg := server.DefaultConfig()
			if err := brokerSettings(c, &cfg); err != nil {
				return err
			}
			// One voter per group: elections are instant, so short timeouts cost nothing.
			mcfg := server.DefaultMetaConfig()
			mcfg.NodeConfig = server.NodeConfig{ID: "dev-meta", DataDir: filepath.Join(c.String("data"), "meta"),
				ClientAddr: c.String("meta-listen"), RaftAddr: c.String("meta-raft"), Bootstrap: true,
				TLS: tlsConfig(c), Insecure: insecure(c), Auth: c.Bool("auth"), OpenHTTP: c.Bool("open-http")}
			mcfg.Logger = logger
			mcfg.SetElectionTimeout(200 * time.Millisecond)
			m, err := server.NewMeta(mcfg)
			if err != nil {
				return err
			}
			cfg.NodeConfig = server.NodeConfig{ID: "dev", DataDir: filepath.Join(c.String("data"), "broker"),
				ClientAddr: c.String("listen"), RaftAddr: c.String("raft"), HTTPAddr: c.String("http"), Bootstrap: true,
				TLS: tlsConfig(c), Insecure: insecure(c), Auth: c.Bool("auth"), OpenHTTP: c.Bool("open-http")}
			cfg.BrokerGroup, cfg.Logger, cfg.Meta = "dev", logger, []string{m.ClientAddr()}
			cfg.SetElectionTimeout(200 * time.Millisecond)
			n, err := server.New(cfg)
			if err != nil {
				m.Close()
				return err
			}
			over := ""
			if cfg.TLS.CertFile != "" {
				over = " over tls"
			}
			fmt.Fprintf(os.Stderr, "qmqd: dev queue ready: clients %s%s (metaserver %s), http %s, data %s\n",
				n.ClientAddr(), over, m.ClientAddr(), n.HTTPAddr(), c.String("data"))
			failed := make(chan struct{}) // either node stopped itself
			go func() {
				select {
				case <-n.Failed():
				case <-m.Failed():
				}
				close(failed)
			}()
			handOver(n, waitForSignal(failed), logger)
			return errors.Join(n.FailedErr(), m.FailedErr(), n.Close(), m.Close())
		},
	}
}

func metaCommand() *cli.Command {
	return &cli.Command{
		Name:  "meta",
		Usage: "run one node of the metaserver group",
		Description: "The metaserver holds the broker groups, their members and the subject routes, in a Raft\n" +
			"group of its own (three nodes in production). Start the first with --bootstrap; start the\n" +
			"others without it and add each with\n" +
			"  qmqctl --server FIRST join --broker-group meta --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"Brokers find it through their --meta flag; clients may use any metaserver address.",
		Flags: append(nodeFlags("the metaserver group"),
			&cli.IntFlag{Name: "subject-groups", Value: 2, Usage: "assign a new subject to `K` broker groups (fewer if fewer are available)"},
			&cli.DurationFlag{Name: "group-timeout", Value: 10 * time.Second, Usage: "mark a broker group unavailable after `DUR` without a heartbeat from its leader"},
		),
		Action: func(c *cli.Context) error {
			logger, err := newLogger(c)
			if err != nil {
				return err
			}
			cfg := server.DefaultMetaConfig()
			cfg.NodeConfig, cfg.Logger = nodeConfig(c), logger
			cfg.SubjectGroups, cfg.GroupTimeout = c.Int("subject-groups"), c.Duration("group-timeout")
			cfg.SetElectionTimeout(c.Duration("election-timeout"))
			m, err := server.NewMeta(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "qmqd: metaserver node %s: clients %s, raft %s, http %s\n", cfg.ID, m.ClientAddr(), cfg.RaftAddr, m.HTTPAddr())
			handOver(m, waitForSignal(m.Failed()), logger)
			return errors.Join(m.FailedErr(), m.Close())
		},
	}
}

func brokerCommand() *cli.Command {
	return &cli.Command{
		Name:  "broker",
		Usage: "run one node of a broker group",
		Description: "Every node of a broker group (--broker-group NAME) gets a unique --id and its own --data.\n" +
			"Start the first with --bootstrap; start the others without it and add each with\n" +
			"  qmqctl --server META join --broker-group NAME --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"(--server: a metaserver address, or for a group without one, the first node's).\n" +
			"With --meta the node registers with the metaserver on start and reports to it every few\n" +
			"seconds; nothing needs registering by hand. A restarted node needs no flags beyond its\n" +
			"usual ones: it rejoins from its data.",
		Flags: append(append(nodeFlags("the broker group"),
			&cli.StringFlag{Name: "broker-group", Aliases: []string{"group"}, Required: true,
				Usage: "the `NAME` of the broker group the node belongs to (--group: the old spelling)"},
			&cli.StringFlag{Name: "meta", Usage: "metaserver `HOST:PORT[,…]`; without it the group stands alone"},
			&cli.DurationFlag{Name: "session-timeout", Value: 30 * time.Second, Usage: "reclaim a silent consumer's unacked messages after `DUR`"},
			&cli.StringFlag{Name: "clock-offset-file", Usage: "fault injection: add the duration written in `FILE` (\"30s\", \"-5s\") to this node's clock; read every 100 ms"},
			&cli.StringFlag{Name: "disk-free-file", Usage: "fault injection: report at most the byte count written in `FILE` as the data disk's free space; read every 100 ms"},
			&cli.StringFlag{Name: "sync-fault-file", Usage: "fault injection: while `FILE` holds the word EIO, the state machine's checkpoint syncs fail with EIO (a lost write-back), which stops the node"},
			initialVersionFlag(),
		), brokerFlags()...),
		Action: func(c *cli.Context) error {
			logger, err := newLogger(c)
			if err != nil {
				return err
			}
			cfg := server.DefaultConfig()
			cfg.NodeConfig, cfg.Logger = nodeConfig(c), logger
			cfg.BrokerGroup, cfg.Meta = c.String("broker-group"), transport.SplitServers(c.String("meta"))
			cfg.SessionTimeout = c.Duration("session-timeout")
			if err := brokerSettings(c, &cfg); err != nil {
				return err
			}
			if err := initialVersionSettings(c, &cfg); err != nil {
				return err
			}
			if path := c.String("clock-offset-file"); path != "" {
				cfg.Now = fileClock(path, logger)
			}
			if path := c.String("disk-free-file"); path != "" {
				cfg.FSM.DiskFree = fileDiskFree(path, logger)
			}
			if path := c.String("sync-fault-file"); path != "" {
				cfg.FSM.SyncFault = fileSyncFault(path, logger)
			}
			cfg.SetElectionTimeout(c.Duration("election-timeout"))
			n, err := server.New(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "qmqd: node %s of broker group %s: clients %s, raft %s, http %s\n",
				cfg.ID, cfg.BrokerGroup, n.ClientAddr(), cfg.RaftAddr, n.HTTPAddr())
			handOver(n, waitForSignal(n.Failed()), logger)
			return errors.Join(n.FailedErr(), n.Close())
		},
	}
}

// nodeFlags are the flags of every node, of a group described by group.
func nodeFlags(group string) []cli.Flag {
	return append([]cli.Flag{
		&cli.StringFlag{Name: "id", Required: true, Usage: "node `ID`, unique in " + group},
		&cli.StringFlag{Name: "data", Required: true, Usage: "data `DIR`"},
		&cli.StringFlag{Name: "listen", Required: true, Usage: "client `HOST:PORT`"},
		&cli.StringFlag{Name: "raft", Required: true, Usage: "Raft `HOST:PORT` to listen on, and the address the group records for this node unless --raft-advertise"},
		&cli.StringFlag{Name: "http", Usage: "admin HTTP `HOST:PORT` (/status, /metrics); none if empty"},
		&cli.StringFlag{Name: "advertise", Usage: "client `HOST:PORT` to give clients, if not --listen"},
		&cli.StringFlag{Name: "raft-advertise", Usage: "Raft `HOST:PORT` the other members dial, if not --raft (a proxy in front, a stable name): " +
			"an IP address, or a DNS name that the group records as the name and resolves at every dial, so that a node back on another IP under its name is found"},
		&cli.StringFlag{Name: "source-ip", Usage: "local `IP` to dial other nodes' client ports from (the metaserver's, peers' for clocks and joins), " +
			"so that a firewall or proxy can tell which node calls; the system's choice if empty"},
		&cli.BoolFlag{Name: "bootstrap", Usage: "start " + group + " with this node as its only voter (ignored once it has data)"},
		&cli.DurationFlag{Name: "election-timeout", Value: time.Second, Usage: "Raft heartbeat and election timeout `DUR`; the leader lease is half of it"},
		&cli.Int64Flag{Name: "client-memory", Value: transport.DefaultMaxInFlightBytes >> 20, Usage: "hold at most `MIB` MiB of client requests and replies in flight; beyond, connections wait"},
		&cli.IntFlag{Name: "max-conns-per-addr", Value: transport.DefaultMaxConnsPerAddr, Usage: "refuse (TOO_MANY_CONNECTIONS) connections beyond `N` from one IP address"},
		&cli.IntFlag{Name: "max-conns", Value: transport.DefaultMaxConns, Usage: "refuse (TOO_MANY_CONNECTIONS) connections beyond `N` in all"},
		&cli.IntFlag{Name: "max-requests-per-conn", Value: transport.DefaultMaxInFlight,
			Usage: "handle at most `N` requests of one connection at once; beyond, the connection is not read until one finishes " +
				"(the client is slowed, not failed; counted in qmq_client_requests_per_conn_waits_total)"},
		&cli.IntFlag{Name: "max-backups", Value: server.DefaultMaxBackups,
			Usage: "serve at most `N` backups (qmqctl backup) at once, each holding a snapshot open; one more is refused (RESOURCE_EXHAUSTED)"},
		&cli.DurationFlag{Name: "backup-idle-timeout", Value: server.DefaultBackupIdle,
			Usage: "release a backup's snapshot `DUR` after its last request (an abandoned backup; run again, it resumes while the snapshot is stored)"},
		&cli.Int64Flag{Name: "backup-rate", Usage: "read at most `MIB` MiB a second for backups, all together, to leave the disk and CPU to the requests the node serves (0: no bound)"},
	}, slices.Concat(tlsFlags(), authFlags())...)
}

// nodeConfig reads nodeFlags.
func nodeConfig(c *cli.Context) server.NodeConfig {
	return server.NodeConfig{ID: c.String("id"), DataDir: c.String("data"), ClientAddr: c.String("listen"),
		AdvertiseAddr: c.String("advertise"), RaftAddr: c.String("raft"), RaftAdvertiseAddr: c.String("raft-advertise"),
		HTTPAddr: c.String("http"), SourceIP: c.String("source-ip"), Bootstrap: c.Bool("bootstrap"),
		ClientLimits: server.ClientLimits{Memory: c.Int64("client-memory") << 20, ConnsPerAddr: c.Int("max-conns-per-addr"), Conns: c.Int("max-conns"),
			RequestsPerConn: c.Int("max-requests-per-conn")},
		Backups: server.BackupLimits{Max: c.Int("max-backups"), Idle: c.Duration("backup-idle-timeout"), Rate: c.Int64("backup-rate") << 20},
		TLS:     tlsConfig(c), Insecure: insecure(c), Auth: c.Bool("auth"), OpenHTTP: c.Bool("open-http")}
}

func newLogger(c *cli.Context) (hclog.Logger, error) {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return nil, fmt.Errorf("unknown --log-level %q", c.String("log-level"))
	}
	return hclog.New(&hclog.LoggerOptions{Name: "qmqd", Level: level, Output: os.Stderr}), nil
}

// waitForSignal returns on SIGINT or SIGTERM, with the channel that
// delivers the next one, or nil when failed is closed (the node stopped
// itself).
func waitForSignal(failed <-chan struct{}) <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
		return sig
	case <-failed:
		return nil
	}
}

// handOverTimeout bounds the leadership handover of a node asked to stop.
const handOverTimeout = 10 * time.Second

// handOver, on a node asked to stop (sig, from waitForSignal, not nil)
// that leads its group, hands leadership to another voter before the node
// closes, within handOverTimeout; a second signal, or a handover that
// fails, stops the node without it (the failure logged).
func handOver(g interface {
	HandOverLeadership(context.Context) error
}, sig <-chan os.Signal, logger hclog.Logger) {
	if sig == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), handOverTimeout)
	defer cancel()
	go func() {
		select {
		case <-sig:
			logger.Warn("a second signal: stopping without waiting for the leadership handover")
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := g.HandOverLeadership(ctx); err != nil {
		logger.Warn("stopping without handing leadership over", "error", err)
	}
}
