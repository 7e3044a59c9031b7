// Command qmqctl is the queue's operator and user tool: send and consume
// messages, show the cluster's status, add and remove nodes, administer
// consumer groups and broker groups, and benchmark.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/cli/internal/cmdline"
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
	os.Exit(exitStatus(execute(newApp(), os.Args), os.Stderr))
}

// execute runs app on args (args[0] is the program's name).
func execute(app *cli.App, args []string) error {
	return cmdline.Execute(app, args)
}

// exitStatus says on stderr how a run that returned err failed, if it
// did, and returns its exit status: 0, 1 for a command that failed, 2 for
// a usage mistake (nothing was done), 128 + the signal's number for a
// command a signal stopped (130 for Ctrl-C).
func exitStatus(err error, stderr io.Writer) int {
	var intr *interrupted
	switch {
	case err == nil:
		return 0
	case errors.As(err, &intr):
		return intr.status()
	case cmdline.IsUsage(err):
		fmt.Fprintln(stderr, err)
		return cmdline.ExitUsage
	case err == errFailed:
		return cmdline.ExitFailure
	}
	fmt.Fprintln(stderr, "qmqctl:", plain(err))
	return cmdline.ExitFailure
}

// newApp returns qmqctl's commands.
func newApp() *cli.App {
	return &cli.App{
		Name:    "qmqctl",
		Version: version.String(),
		Usage:   "send, consume and administer QMQ",
		Description: "A CONSUMER GROUP (consumer-group, consume --group) is a set of consumers that together\n" +
			"receive every message of a subject once. A BROKER GROUP (broker-group, --broker-group) is\n" +
			"a Raft group of broker nodes that stores subjects; meta names the metaserver group.\n" +
			"Global options go before or after the command: `qmqctl status --server HOST:PORT`.\n" +
			"`qmqctl completion bash|zsh|fish` prints a shell completion script.\n\n" +
			"Exit status: 0 done; 1 the command failed (it says why on stderr); 2 a usage mistake\n" +
			"(a flag or command that does not exist, a value missing or out of bounds: nothing was\n" +
			"done); 130 stopped by Ctrl-C (SIGINT), 143 by SIGTERM.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{
				Name: "server", Value: qmq.DefaultServer, EnvVars: []string{"QMQ_SERVER"},
				Usage: "metaserver or broker `HOST:PORT[,HOST:PORT…]`: any node of the cluster will do",
			},
		}, tlsFlags()...),
		Before: checkCredentials,
		Commands: []*cli.Command{sendCommand(), consumeCommand(), statusCommand(), joinCommand(), leaveCommand(),
			consumerGroupCommand(), brokerGroupCommand(), groupCommand(), configCommand(), deadLetterCommand(), messageCommand(), subjectCommand(),
			appCommand(), delayCommand(), upgradeCommand(), backupCommand(), benchCommand(), tlsCommand(), completionCommand()},
	}
}
