package main

import (
	"errors"
	"flag"
	"io"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

// withArg makes a command that takes one argument (a NAME) anywhere among
// its options: `app create billing --admin` as well as `app create --admin
// billing`. urfave/cli stops reading options at the first argument, so the
// command skips its parsing and its options are read here, from a flag set
// of the command's flags, into a context under the command's own (so
// global flags such as --server are found as usual).
func withArg(what string, action func(c *cli.Context, arg string) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		set := flag.NewFlagSet(c.Command.Name, flag.ContinueOnError)
		set.SetOutput(io.Discard)
		for _, f := range c.Command.Flags {
			if err := f.Apply(set); err != nil {
				return err
			}
		}
		args, err := parseInterspersed(set, c.Args().Slice())
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			return cmdline.FlagError(c, err, append(slices.Clone(c.App.Flags), c.Command.Flags...))
		}
		sub := cli.NewContext(c.App, set, c)
		if err != nil || sub.Bool("help") {
			return cli.ShowCommandHelp(c.Lineage()[1], c.Command.Name)
		}
		if len(args) != 1 {
			return cmdline.Usagef(c, "takes one argument, %s (got %d)", what, len(args))
		}
		return action(sub, args[0])
	}
}

// parseInterspersed parses args into set, options and arguments in any
// order, and returns the arguments. After "--" every word is an argument.
func parseInterspersed(set *flag.FlagSet, args []string) ([]string, error) {
	var out []string
	for {
		if err := set.Parse(args); err != nil {
			return nil, err
		}
		rest := set.Args()
		// Parse stops at an argument, or after a "--" it consumed.
		if len(rest) == 0 || len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(out, rest...), nil
		}
		out = append(out, rest[0])
		args = rest[1:]
	}
}
