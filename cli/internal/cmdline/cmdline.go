// Package cmdline is what qmqd and qmqctl share about their command lines:
// a mistake in how a command was called is one line on stderr that names
// it as typed, with a "did you mean" when a flag or a command is close to
// one that exists, and exit status 2 (no help dumped with it); global
// flags are accepted after the command as well as before it; required
// flags are checked without printing the help; and shell completion
// completes commands and flags, global ones included.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/urfave/cli/v2"
)

// Exit statuses.
const (
	ExitFailure = 1 // the command ran and failed (it said why)
	ExitUsage   = 2 // the command was called wrongly: nothing was done
)

// UsageError is a mistake in how a command was called: a flag or command
// that does not exist, a flag without its value, a required flag missing,
// a value out of bounds, too many arguments. Nothing was done.
type UsageError struct {
	Cmd string // the command as typed: "qmqctl send"
	Msg string
}

func (e *UsageError) Error() string { return e.Cmd + ": " + e.Msg }

// Usagef returns a UsageError of the command c runs.
func Usagef(c *cli.Context, format string, args ...any) error {
	return &UsageError{Cmd: Path(c), Msg: fmt.Sprintf(format, args...)}
}

// IsUsage reports whether err is a UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// Path is the command c runs, as typed: "qmqctl consumer-group list".
func Path(c *cli.Context) string {
	var names []string
	for _, x := range c.Lineage() {
		if x.Command != nil && x.Command.Name != "" {
			names = append(names, x.Command.Name)
		}
	}
	slices.Reverse(names)
	names = slices.Compact(names)
	if len(names) == 0 || c.App != nil && names[0] != c.App.Name {
		names = append([]string{c.App.Name}, names...)
	}
	return strings.Join(names, " ")
}

// completionFlag is what the shell's completion function appends to the
// words typed so far.
const completionFlag = "--generate-bash-completion"

// argsKey is where Execute keeps the arguments, in App.Metadata, for the
// error messages (the words as typed) and for completion.
const argsKey = "cmdline.args"

// Execute runs app on args (args[0] is the program) once Prepare has
// set it up, with the global flags found after the command moved before
// it.
func Execute(app *cli.App, args []string) error {
	if n := len(args); n > 0 && args[n-1] == completionFlag && slices.Contains(args[:n-1], "--") {
		// A completion script asking about words after "--": urfave/cli
		// would take the flag for an argument and run the command. Words
		// after "--" are arguments, with nothing to offer.
		return nil
	}
	Prepare(app)
	args = MoveGlobalFlags(app, args)
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[argsKey] = args
	return app.Run(args)
}

func typedArgs(c *cli.Context) []string {
	if c.App == nil || c.App.Metadata == nil {
		return nil
	}
	args, _ := c.App.Metadata[argsKey].([]string)
	return args
}

// required records the flags made optional for urfave/cli (whose check of
// a required flag prints the whole help before the error) and checked by
// the command instead. Package-level flags shared by commands (and by
// the apps tests make) are recorded once.
var required = struct {
	sync.Mutex
	flags map[cli.Flag]bool
}{flags: map[cli.Flag]bool{}}

// Prepare sets up app and each of its commands for Execute: usage errors
// as UsageErrors, required flags checked without the help printed, an
// unknown command refused with a suggestion, no "help" subcommand in
// every command (--help stays), shell completion. It is idempotent.
func Prepare(app *cli.App) {
	if app.Metadata != nil && app.Metadata["cmdline.prepared"] == true {
		return
	}
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata["cmdline.prepared"] = true
	if app.HelpName == "" {
		app.HelpName = app.Name
	}
	app.EnableBashCompletion = true
	app.OnUsageError = onUsageError
	app.BashComplete = completer(app.Flags, app.Flags)
	if app.Action == nil {
		app.Action = parentAction
	}
	if app.Command("help") == nil {
		// urfave/cli adds --help only with its own help command.
		app.Commands = append(app.Commands, helpCommand())
		app.Flags = append(app.Flags, cli.HelpFlag)
	}
	for _, c := range app.Commands {
		prepare(app, c)
	}
}

func prepare(app *cli.App, c *cli.Command) {
	c.OnUsageError = onUsageError
	c.HideHelpCommand = true
	c.BashComplete = completer(c.Flags, app.Flags)
	var must []cli.Flag
	required.Lock()
	for _, f := range c.Flags {
		if r, ok := f.(cli.RequiredFlag); ok && r.IsRequired() {
			if optional(f) {
				required.flags[f] = true
			}
		}
		if required.flags[f] {
			must = append(must, f)
		}
	}
	required.Unlock()
	if len(must) > 0 {
		before := c.Before
		c.Before = func(ctx *cli.Context) error {
			var missing []string
			for _, f := range must {
				if !isSet(ctx, f) {
					missing = append(missing, "--"+f.Names()[0])
				}
			}
			switch len(missing) {
			case 0:
			case 1:
				return Usagef(ctx, "required flag %s not set", missing[0])
			default:
				return Usagef(ctx, "required flags %s not set", strings.Join(missing, ", "))
			}
			if before != nil {
				return before(ctx)
			}
			return nil
		}
	}
	if len(c.Subcommands) > 0 && c.Action == nil {
		c.Action = parentAction
	}
	if action := c.Action; len(c.Subcommands) == 0 && action != nil && c.ArgsUsage == "" && !c.SkipFlagParsing && c.Name != "help" {
		// A command that takes no argument refuses one rather than ignore
		// it: `status extra` is a mistake, not a status.
		c.Action = func(ctx *cli.Context) error {
			if ctx.NArg() > 0 {
				return Usagef(ctx, "takes no arguments, got %q", ctx.Args().Slice())
			}
			return action(ctx)
		}
	}
	for _, s := range c.Subcommands {
		prepare(app, s)
	}
}

func isSet(c *cli.Context, f cli.Flag) bool {
	for _, n := range f.Names() {
		if c.IsSet(n) {
			return true
		}
	}
	return false
}

// optional makes a required flag optional for urfave/cli; false for a
// kind of flag it does not know (which then stays required).
func optional(f cli.Flag) bool {
	switch f := f.(type) {
	case *cli.StringFlag:
		f.Required = false
	case *cli.IntFlag:
		f.Required = false
	case *cli.Int64Flag:
		f.Required = false
	case *cli.UintFlag:
		f.Required = false
	case *cli.Uint64Flag:
		f.Required = false
	case *cli.DurationFlag:
		f.Required = false
	case *cli.BoolFlag:
		f.Required = false
	case *cli.Float64Flag:
		f.Required = false
	case *cli.StringSliceFlag:
		f.Required = false
	case *cli.IntSliceFlag:
		f.Required = false
	case *cli.Int64SliceFlag:
		f.Required = false
	case *cli.GenericFlag:
		f.Required = false
	case *cli.PathFlag:
		f.Required = false
	default:
		return false
	}
	return true
}

// parentAction runs a command that has subcommands when none was named:
// its help, or, for a word that names none, a usage error.
func parentAction(c *cli.Context) error {
	if c.Args().Present() {
		name := c.Args().First()
		return Usagef(c, "unknown command %s%s", name, didYouMean(name, commandNames(c.Command.Subcommands)))
	}
	if c.Command.Name == c.App.Name || c.Command.Name == "" {
		return cli.ShowAppHelp(c)
	}
	// A script that builds the subcommand from an empty variable must not
	// read help on stdout and exit 0 as a success.
	return Usagef(c, "missing command (one of %s; --help says what each does)", strings.Join(commandNames(c.Command.Subcommands), ", "))
}

// commandNames are the names and aliases of the visible commands.
func commandNames(cmds []*cli.Command) []string {
	var out []string
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c.Names()...)
		}
	}
	return out
}

// helpCommand is `help [COMMAND…]`: the help of the command named, or a
// usage error naming a word that is no command (urfave/cli's own exits 3
// from inside the library).
func helpCommand() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show the commands, or one command's help",
		ArgsUsage: "[COMMAND [SUBCOMMAND]]",
		Action: func(c *cli.Context) error {
			words := c.Args().Slice()
			if len(words) == 0 {
				return cli.ShowAppHelp(c)
			}
			cmds := c.App.Commands
			var cmd *cli.Command
			for i, w := range words {
				var next *cli.Command
				for _, x := range cmds {
					if x.HasName(w) && x.Name != "help" {
						next = x
					}
				}
				if next == nil {
					path := strings.Join(append([]string{c.App.Name}, words[:i]...), " ")
					return &UsageError{Cmd: path, Msg: fmt.Sprintf("unknown command %s%s", w, didYouMean(w, commandNames(cmds)))}
				}
				cmd, cmds = next, next.Subcommands
			}
			full := strings.Join(append([]string{c.App.Name}, words...), " ")
			if cmd.HelpName == "" {
				cmd.HelpName = full
			}
			tmpl := cli.CommandHelpTemplate
			if len(cmd.Subcommands) > 0 {
				tmpl = cli.SubcommandHelpTemplate
			}
			if cmd.CustomHelpTemplate != "" {
				tmpl = cmd.CustomHelpTemplate
			}
			if !slices.ContainsFunc(cmd.Flags, func(f cli.Flag) bool { return slices.Contains(f.Names(), "help") }) {
				cmd.Flags = append(cmd.Flags, cli.HelpFlag)
			}
			cli.HelpPrinter(c.App.Writer, tmpl, cmd)
			return nil
		},
	}
}

var invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)

// onUsageError turns a flag parse error into a UsageError naming the flag
// as typed.
func onUsageError(c *cli.Context, err error, _ bool) error {
	return FlagError(c, err, commandFlags(c))
}

// commandFlags are the names of the flags the command c runs accepts: its
// own and the global ones (moved before the command when given after it).
func commandFlags(c *cli.Context) []cli.Flag {
	flags := slices.Clone(c.App.Flags)
	if c.Command != nil && c.Command.Name != c.App.Name {
		flags = append(flags, c.Command.Flags...)
	}
	return flags
}

// FlagError turns an error of Go's flag package, from parsing the command
// c runs, into a UsageError that names the flag as typed, with a "did you
// mean" among flags for one that does not exist.
func FlagError(c *cli.Context, err error, flags []cli.Flag) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: -"):
		name := strings.TrimPrefix(msg, "flag provided but not defined: -")
		var names []string
		for _, f := range flags {
			for _, n := range f.Names() {
				names = append(names, dashed(n))
			}
		}
		typed := asTyped(typedArgs(c), name)
		return Usagef(c, "unknown flag %s%s", typed, didYouMean(typed, names))
	case strings.HasPrefix(msg, "flag needs an argument: -"):
		name := strings.TrimPrefix(msg, "flag needs an argument: -")
		return Usagef(c, "flag %s needs a value", asTyped(typedArgs(c), name))
	}
	if m := invalidValue.FindStringSubmatch(msg); m != nil {
		why := m[3]
		switch why {
		case "parse error":
			why = "not a number"
			for _, f := range flags {
				if slices.Contains(f.Names(), m[2]) {
					why = malformed(f)
				}
			}
		case "value out of range":
			why = "out of range"
		}
		return Usagef(c, "invalid value %q for %s: %s", m[1], asTyped(typedArgs(c), m[2]), why)
	}
	if errors.Is(err, flag.ErrHelp) {
		return Usagef(c, "%v", err)
	}
	return Usagef(c, "%s", msg)
}

// malformed says what a flag's value must be, for one that is not.
func malformed(f cli.Flag) string {
	switch f.(type) {
	case *cli.DurationFlag:
		return "not a duration (such as 500ms, 90s, 2h30m)"
	case *cli.BoolFlag:
		return "not true or false"
	case *cli.Float64Flag, *cli.Float64SliceFlag:
		return "not a number"
	}
	return "not a whole number"
}

// dashed writes a flag's name as given on a command line.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// asTyped is the word of args that gave the flag name, without its
// "=value": "--subjet" or "-subjet"; dashed(name) if none did.
func asTyped(args []string, name string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		w, _, _ := strings.Cut(a, "=")
		if strings.HasPrefix(w, "-") && strings.TrimLeft(w, "-") == name {
			return w
		}
	}
	return dashed(name)
}

// didYouMean is " (did you mean X?)" for the candidate closest to typed,
// "" when none is close.
func didYouMean(typed string, candidates []string) string {
	if s := Suggest(typed, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}

// Suggest returns the candidate closest to typed by edit distance (or
// that typed is the start of), "" when none is close enough to be what
// was meant. Flags compare without their dashes.
func Suggest(typed string, candidates []string) string {
	bare := strings.TrimLeft(typed, "-")
	if bare == "" {
		return ""
	}
	best, bestD := "", -1
	limit := max(1, min(3, len(bare)/3))
	for _, c := range candidates {
		cb := strings.TrimLeft(c, "-")
		if cb == bare {
			continue
		}
		d := distance(strings.ToLower(bare), strings.ToLower(cb))
		if len(bare) >= 3 && strings.HasPrefix(cb, bare) {
			d = min(d, 1)
		}
		if d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, counting an
// adjacent transposition as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// MoveGlobalFlags returns args with the global flags (app.Flags) given
// after the command moved before it, so that `qmqctl status --server X`
// is `qmqctl --server X status`. A flag the command itself defines stays
// where it is, as does everything after "--".
func MoveGlobalFlags(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	globals := flagIndex(app.Flags)
	delete(globals, "help")
	delete(globals, "h")
	delete(globals, "version")
	delete(globals, "v")
	var front, rest []string
	cmds := app.Commands
	var own map[string]bool // the current command's flags: name → takes a value
	inCommand, positional := false, false
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		if name, inline, ok := flagWord(a); ok {
			takes, isOwn := own[name]
			if !inCommand || isOwn {
				if !inCommand {
					takes = globals[name]
					front = append(front, a)
				} else {
					rest = append(rest, a)
				}
				if takes && !inline && i+1 < len(args) {
					i++
					if inCommand {
						rest = append(rest, args[i])
					} else {
						front = append(front, args[i])
					}
				}
				continue
			}
			if takes, isGlobal := globals[name]; isGlobal {
				if takes && !inline {
					if i+1 >= len(args) || args[i+1] == completionFlag {
						rest = append(rest, a) // being completed: leave it
						continue
					}
					front = append(front, a, args[i+1])
					i++
				} else {
					front = append(front, a)
				}
				continue
			}
			rest = append(rest, a)
			continue
		}
		if !positional {
			var cmd *cli.Command
			for _, c := range cmds {
				if c.HasName(a) {
					cmd = c
				}
			}
			if cmd != nil {
				inCommand, cmds, own = true, cmd.Subcommands, flagIndex(cmd.Flags)
				rest = append(rest, a)
				continue
			}
			if inCommand {
				positional = true
			}
			inCommand = true // an unknown command: its error names it
		}
		rest = append(rest, a)
	}
	return append(append([]string{args[0]}, front...), rest...)
}

// flagWord returns the name of a flag word ("--name", "-name",
// "--name=value"), and whether it holds its value.
func flagWord(a string) (name string, inline, ok bool) {
	if len(a) < 2 || a[0] != '-' || a == completionFlag {
		return "", false, false
	}
	w, _, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if w == "" {
		return "", false, false
	}
	return w, inline, true
}

// flagIndex maps every name of flags to whether the flag takes a value.
func flagIndex(flags []cli.Flag) map[string]bool {
	out := map[string]bool{}
	for _, f := range flags {
		takes := true
		if d, ok := f.(cli.DocGenerationFlag); ok {
			takes = d.TakesValue()
		}
		for _, n := range f.Names() {
			out[n] = takes
		}
	}
	return out
}

// completer completes the word being typed: a flag of the command (or a
// global one) when it starts with "-", else a subcommand.
func completer(own, globals []cli.Flag) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		args := typedArgs(c)
		cur := ""
		if n := len(args); n >= 2 && args[n-1] == completionFlag {
			cur = args[n-2]
		}
		w := c.App.Writer
		if strings.HasPrefix(cur, "-") {
			flags := own
			if c.Command == nil || c.Command.Name != c.App.Name {
				flags = append(slices.Clone(own), globals...)
			}
			printFlags(w, flags, cur)
			return
		}
		cmds := c.App.Commands
		if c.Command != nil && c.Command.Name != c.App.Name && c.Command.Name != "" {
			cmds = c.Command.Subcommands
		}
		for _, x := range cmds {
			if !x.Hidden {
				fmt.Fprintln(w, x.Name)
			}
		}
	}
}

func printFlags(w io.Writer, flags []cli.Flag, cur string) {
	seen := map[string]bool{}
	for _, f := range flags {
		if v, ok := f.(cli.VisibleFlag); ok && !v.IsVisible() {
			continue
		}
		for _, n := range f.Names() {
			d := dashed(n)
			if len(n) > 1 && strings.HasPrefix(d, cur) && !seen[d] {
				seen[d] = true
				fmt.Fprintln(w, d)
			}
		}
	}
	if strings.HasPrefix("--help", cur) && !seen["--help"] {
		fmt.Fprintln(w, "--help")
	}
}
