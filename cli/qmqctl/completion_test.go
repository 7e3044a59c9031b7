package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// completion prints a script for bash, zsh and fish that the shell accepts
// (checked where the shell is installed: bash at least), and bash's
// completes a command's name, a subcommand's and a flag's, global ones
// after the command included, by asking qmqctl.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, stderr, status := runCLIStatus("completion", shell)
		if status != 0 || !strings.Contains(out, "qmqctl") {
			t.Fatalf("qmqctl completion %s: exit status %d, %s\n%s", shell, status, stderr, out)
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			if shell == "bash" {
				t.Fatal("bash is not installed")
			}
			t.Logf("%s is not installed: its script is not checked", shell)
			continue
		}
		file := filepath.Join(t.TempDir(), "qmqctl."+shell)
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command(path, "-n", file).CombinedOutput(); err != nil {
			t.Errorf("%s -n on qmqctl completion %s: %v\n%s\n%s", shell, shell, err, b, out)
		}
	}
	script, _, _ := runCLIStatus("completion", "bash")
	dir := qmqctlOnPath(t)
	complete := func(words ...string) []string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) +
			"\n_qmqctl_complete\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command("bash", "-c", prog)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s", words, err, b)
		}
		return strings.Fields(string(b))
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"qmqctl", "sta"}, []string{"status"}},
		{[]string{"qmqctl", "consumer-"}, []string{"consumer-group"}},
		{[]string{"qmqctl", "consumer-group", "s"}, []string{"set", "show"}},
		{[]string{"qmqctl", "broker-group", ""}, []string{"readonly", "transfer-leader", "writable"}},
		{[]string{"qmqctl", "send", "--sub"}, []string{"--subject"}},
		{[]string{"qmqctl", "status", "--ser"}, []string{"--server"}},
		{[]string{"qmqctl", "consume", "--bo"}, []string{"--body"}},
	} {
		got := complete(c.words...)
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("completing %q: %q, want %q", c.words, got, c.want)
		}
	}
	// After "--" only arguments follow: nothing is offered, and the command
	// is not run (urfave/cli would take the completion flag for an
	// argument and send, ack or purge for real).
	if got := complete("qmqctl", "send", "--server", "127.0.0.1:1", "--subject", "x", "--", ""); len(got) != 0 {
		t.Errorf("completing after --: %q, want nothing", got)
	}
	out, stderr, status := runCLIStatus("send", "--server", "127.0.0.1:1", "--subject", "x", "--", "--generate-bash-completion")
	if status != 0 || out != "" || stderr != "" {
		t.Errorf("a completion request after --: exit status %d, stdout %q, stderr %q; want 0 and nothing (the command not run)", status, out, stderr)
	}
	// The old name `group` is not offered.
	if got := complete("qmqctl", "gro"); len(got) != 0 {
		t.Errorf("completing gro: %q, want nothing (group is a hidden old name)", got)
	}
}
