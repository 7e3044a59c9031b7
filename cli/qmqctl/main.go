// Command qmqctl is the queue's operator and user tool: send and consume
// messages, show a group's status, add and remove nodes, and benchmark.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
)

// errFailed makes qmqctl exit 1 after a command already said what failed.
var errFailed = errors.New("")

func main() {
	if err := newApp().Run(os.Args); err != nil {
		if err != errFailed {
			fmt.Fprintln(os.Stderr, "qmqctl:", err)
		}
		os.Exit(1)
	}
}

// newApp returns qmqctl's commands.
func newApp() *cli.App {
	return &cli.App{
		Name:  "qmqctl",
		Usage: "send, consume and administer QMQ",
		Flags: append([]cli.Flag{
			&cli.StringFlag{
				Name: "server", Value: qmq.DefaultServer, EnvVars: []string{"QMQ_SERVER"},
				Usage: "metaserver or broker `HOST:PORT[,HOST:PORT…]`: any node of the cluster will do",
			},
		}, tlsFlags()...),
		Before: checkCredentials,
		Commands: []*cli.Command{sendCommand(), consumeCommand(), statusCommand(), joinCommand(), leaveCommand(), groupCommand(),
			configCommand(), deadLetterCommand(), subjectCommand(), appCommand(), delayCommand(), benchCommand(), tlsCommand()},
	}
}
