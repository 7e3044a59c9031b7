package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
)

// yesFlag lets a destructive command go ahead without asking.
var yesFlag = &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "go ahead without asking (needed when stdin is not a terminal)"}

// stdinIsTerminal says whether confirm may ask; tests set it.
var stdinIsTerminal = func() bool { return term.IsTerminal(int(os.Stdin.Fd())) }

// confirmIn is where confirm reads the answer; tests set it.
var confirmIn io.Reader = os.Stdin

// confirm lets a destructive command go ahead: at once with --yes; else,
// on a terminal, once the user answers y to what it will destroy (what, a
// sentence); else it refuses, saying what it would have destroyed.
func confirm(c *cli.Context, what string) error {
	if c.Bool("yes") {
		return nil
	}
	if !stdinIsTerminal() {
		return fmt.Errorf("%s; nothing was done: run it again with --yes to go ahead", what)
	}
	fmt.Fprintf(c.App.ErrWriter, "%s. Go ahead? [y/N] ", what)
	answer, _ := bufio.NewReader(confirmIn).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed; nothing was done")
	}
	return nil
}
