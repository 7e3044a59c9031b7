// Command qmqctl is the queue's operator and user tool: send and consume
// messages, show a group's status, add and remove nodes, and benchmark.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// errFailed makes qmqctl exit 1 after a command already said what failed.
var errFailed = errors.New("")

// plain shortens an error that says no server could be reached to that
// one sentence ("qmq: cannot reach ADDR: connection refused: is qmqd
// running?"): what wrapped it (the request, the message) adds nothing a
// user acts on.
func plain(err error) error {
	if !errors.Is(err, qmq.ErrUnreachable) {
		return err
	}
	msg := err.Error() // the sentence begins "qmq: cannot reach"
	if i := strings.LastIndex(msg, "qmq: "+transport.ErrUnreachable.Error()); i > 0 {
		return errors.New(msg[i:])
	}
	return err
}

func main() {
	if err := newApp().Run(os.Args); err != nil {
		if err != errFailed {
			fmt.Fprintln(os.Stderr, "qmqctl:", plain(err))
		}
		os.Exit(1)
	}
}

// newApp returns qmqctl's commands.
func newApp() *cli.App {
	return &cli.App{
		Name:    "qmqctl",
		Version: version.String(),
		Usage:   "send, consume and administer QMQ",
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
