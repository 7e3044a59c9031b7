// Command qmqd is the queue's server daemon.
//
//	qmqd dev      a complete one-node installation on embedded defaults
//	qmqd broker   one node of a broker group (a Raft cluster)
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/server"
)

func main() {
	app := &cli.App{
		Name:  "qmqd",
		Usage: "the QMQ broker daemon",
		Description: "Runs broker nodes. `qmqd dev` starts a complete one-node queue with no other setup;\n" +
			"`qmqd broker` runs one node of a replicated broker group: bootstrap the first node with\n" +
			"--bootstrap, then add the others with `qmqctl join`.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "trace, debug, info, warn or error", EnvVars: []string{"QMQ_LOG_LEVEL"}},
		},
		Commands: []*cli.Command{devCommand(), brokerCommand()},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "qmqd:", err)
		os.Exit(1)
	}
}

func devCommand() *cli.Command {
	return &cli.Command{
		Name:  "dev",
		Usage: "run a complete one-node queue on embedded defaults",
		Description: "Starts one node that bootstraps its own group; data survives restarts in --data.\n" +
			"Send and consume with `qmqctl send` / `qmqctl consume` (their default server is this one).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "data", Value: "qmq-data", Usage: "data `DIR`"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:6222", Usage: "client `HOST:PORT`"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:6280", Usage: "admin HTTP `HOST:PORT` (/status, /metrics)"},
			&cli.StringFlag{Name: "raft", Value: "127.0.0.1:6223", Usage: "Raft `HOST:PORT`"},
		},
		Action: func(c *cli.Context) error {
			cfg := server.DefaultConfig()
			cfg.ID, cfg.Group, cfg.Bootstrap = "dev", "dev", true
			cfg.DataDir, cfg.ClientAddr, cfg.HTTPAddr, cfg.RaftAddr = c.String("data"), c.String("listen"), c.String("http"), c.String("raft")
			// One voter: elections are instant, so the short timeouts cost nothing.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLease = 200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond
			return run(c, cfg)
		},
	}
}

func brokerCommand() *cli.Command {
	return &cli.Command{
		Name:  "broker",
		Usage: "run one node of a broker group",
		Description: "Every node of a group gets a unique --id and its own --data. Start the first with\n" +
			"--bootstrap; start the others without it and add each with\n" +
			"  qmqctl --server FIRST join --group NAME --id ID --raft HOST:PORT --addr HOST:PORT\n" +
			"A restarted node needs no flags beyond its usual ones: it rejoins from its data.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "id", Required: true, Usage: "node `ID`, unique in the group"},
			&cli.StringFlag{Name: "group", Required: true, Usage: "broker group `NAME`"},
			&cli.StringFlag{Name: "data", Required: true, Usage: "data `DIR`"},
			&cli.StringFlag{Name: "listen", Required: true, Usage: "client `HOST:PORT`"},
			&cli.StringFlag{Name: "raft", Required: true, Usage: "Raft `HOST:PORT` (other members dial it)"},
			&cli.StringFlag{Name: "http", Required: true, Usage: "admin HTTP `HOST:PORT` (/status, /metrics)"},
			&cli.StringFlag{Name: "advertise", Usage: "client `HOST:PORT` to give clients, if not --listen"},
			&cli.BoolFlag{Name: "bootstrap", Usage: "start a new group with this node as its only voter (ignored once it has data)"},
			&cli.DurationFlag{Name: "session-timeout", Value: 30 * time.Second, Usage: "reclaim a silent consumer's unacked messages after `DUR`"},
			&cli.DurationFlag{Name: "election-timeout", Value: time.Second, Usage: "Raft heartbeat and election timeout"},
		},
		Action: func(c *cli.Context) error {
			cfg := server.DefaultConfig()
			cfg.ID, cfg.Group, cfg.DataDir = c.String("id"), c.String("group"), c.String("data")
			cfg.ClientAddr, cfg.RaftAddr, cfg.HTTPAddr = c.String("listen"), c.String("raft"), c.String("http")
			cfg.AdvertiseAddr, cfg.Bootstrap = c.String("advertise"), c.Bool("bootstrap")
			cfg.SessionTimeout = c.Duration("session-timeout")
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = c.Duration("election-timeout"), c.Duration("election-timeout")
			cfg.LeaderLease = cfg.HeartbeatTimeout / 2
			return run(c, cfg)
		},
	}
}

// run starts a node and stops it on SIGINT or SIGTERM.
func run(c *cli.Context, cfg server.Config) error {
	level := hclog.LevelFromString(c.String("log-level"))
	if level == hclog.NoLevel {
		return fmt.Errorf("unknown --log-level %q", c.String("log-level"))
	}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "qmqd", Level: level, Output: os.Stderr})
	n, err := server.New(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "qmqd: node %s of group %s: clients %s, raft %s, http %s\n",
		cfg.ID, cfg.Group, n.ClientAddr(), cfg.RaftAddr, n.HTTPAddr())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return n.Close()
}
