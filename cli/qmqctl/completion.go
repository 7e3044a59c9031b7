package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/cli/internal/cmdline"
)

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "Prints a script that completes qmqctl's commands and flags in that shell (it asks\n" +
			"qmqctl itself, so it follows the installed version). Load it in the current shell, or\n" +
			"install it once:\n" +
			"  bash: source <(qmqctl completion bash)\n" +
			"        qmqctl completion bash > /etc/bash_completion.d/qmqctl\n" +
			"  zsh:  source <(qmqctl completion zsh)   (after compinit)\n" +
			"        qmqctl completion zsh > \"${fpath[1]}/_qmqctl\"\n" +
			"  fish: qmqctl completion fish | source\n" +
			"        qmqctl completion fish > ~/.config/fish/completions/qmqctl.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return cmdline.Usagef(c, "takes one argument, the shell: bash, zsh or fish")
			}
			script, err := completionScript(c.App, c.Args().First())
			if err != nil {
				return cmdline.Usagef(c, "%v", err)
			}
			_, err = fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}

// completionScript returns the completion script of app for shell.
func completionScript(app *cli.App, shell string) (string, error) {
	switch shell {
	case "bash":
		return strings.ReplaceAll(bashCompletion, "PROG", app.Name), nil
	case "zsh":
		return strings.ReplaceAll(zshCompletion, "PROG", app.Name), nil
	case "fish":
		return app.ToFishCompletion()
	}
	return "", fmt.Errorf("unknown shell %s%s: bash, zsh or fish", shell, suggestion(shell, []string{"bash", "zsh", "fish"}))
}

func suggestion(typed string, names []string) string {
	if s := cmdline.Suggest(typed, names); s != "" {
		return " (did you mean " + s + "?)"
	}
	return ""
}

// bashCompletion asks PROG for the words that may come next: the words
// typed so far, the one being typed if it is a flag, and
// --generate-bash-completion (urfave/cli's protocol). It needs nothing
// but bash (not the bash-completion package).
const bashCompletion = `# bash completion for PROG: source <(PROG completion bash)
_PROG_complete() {
  local cur="${COMP_WORDS[COMP_CWORD]}"
  local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local IFS=$'\n'
  local opts w
  # After "--" only arguments follow, and PROG would run the command
  # rather than complete it: leave those words to bash.
  for w in "${words[@]}"; do [[ "$w" == "--" ]] && return 0; done
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  return 0
}
complete -o bashdefault -o default -F _PROG_complete PROG
`

// zshCompletion is bashCompletion for zsh: loaded by compinit from a file
// _PROG on $fpath, or sourced.
const zshCompletion = `#compdef PROG
# zsh completion for PROG: source <(PROG completion zsh), after compinit
_PROG() {
  local -a opts
  local cur="${words[CURRENT]}"
  # After "--" only arguments follow, and PROG would run the command
  # rather than complete it: complete file names instead.
  if (( ${words[(I)--]} && ${words[(I)--]} < CURRENT )); then
    _files
    return
  fi
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$("${(@)words[1,CURRENT-1]}" "$cur" --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$("${(@)words[1,CURRENT-1]}" --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ -n "${opts[1]}" ]]; then
    compadd -a opts
  else
    _files
  fi
}
if [[ "${funcstack[1]}" == "_PROG" ]]; then
  _PROG "$@"
else
  compdef _PROG PROG
fi
`
