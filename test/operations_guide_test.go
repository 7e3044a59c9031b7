package test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOperationsGuide follows docs/operations.md from "Building a cluster
// from nothing" to the end of "Use it": it runs every command of those
// sections, in order, as an operator would, with each address replaced by
// a free one and data directories under a temporary directory. It then
// checks that the nine processes form the cluster the guide promises.
func TestOperationsGuide(t *testing.T) {
	qmqd, qmqctl := Binaries(t)
	dir := t.TempDir()
	cmds := guideCommands(t, "../docs/operations.md", "## Building a cluster from nothing", "## Adding a broker group")
	if len(cmds) < 15 {
		t.Fatalf("found %d commands in the guide, expected the whole walkthrough", len(cmds))
	}
	addrs := map[string]string{}
	rewrite := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGKILL)
			p.Wait()
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				t.Logf("---- %s ----\n%s", filepath.Base(l), tail(l, 30))
			}
		}
	})
	var outputs []string
	for i, line := range cmds {
		line = rewrite.ReplaceAllStringFunc(line, func(a string) string {
			if addrs[a] == "" {
				addrs[a] = FreeAddr(t)
			}
			return addrs[a]
		})
		fields := strings.Fields(line)
		switch fields[0] {
		case "qmqd":
			logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%02d-%s.log", i, fields[1]+"-"+fields[3])))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", "exec "+qmqd+line[len("qmqd"):])
			cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logf, logf
			cmd.SysProcAttr = dieWithParent()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			logf.Close()
			procs = append(procs, cmd)
		case "qmqctl":
			// An operator retries a command that fails because the node just
			// started is not listening yet; a command that keeps failing is a
			// wrong guide.
			var out []byte
			err := Poll(20*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				defer cancel()
				var err error
				out, err = exec.CommandContext(ctx, "sh", "-c", qmqctl+line[len("qmqctl"):]).CombinedOutput()
				return err
			})
			if err != nil {
				t.Fatalf("guide command %q: %v\n%s", line, err, out)
			}
			outputs = append(outputs, string(out))
			t.Logf("$ %s\n%s", line, out)
		default:
			t.Fatalf("guide command %q is neither qmqd nor qmqctl", line)
		}
	}
	if len(procs) != 9 {
		t.Fatalf("the guide started %d processes, want 9", len(procs))
	}
	all := strings.Join(outputs, "\n")
	for _, want := range []string{"2 broker groups", "first order", "group g1", "group g2"} {
		if !strings.Contains(all, want) {
			t.Errorf("the guide's commands never printed %q", want)
		}
	}
	// Once every node has reported, status shows nine nodes, all with a
	// known state.
	meta := addrs["127.0.0.1:6301"]
	err := Poll(20*time.Second, func() error {
		out, err := exec.Command(qmqctl, "--server", meta, "status", "--json").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if n := strings.Count(string(out), `"state": "Unknown"`); n > 0 {
			return fmt.Errorf("%d nodes have not reported yet", n)
		}
		if n := strings.Count(string(out), `"state": "Leader"`) + strings.Count(string(out), `"state": "Follower"`); n < 9 {
			return fmt.Errorf("%d nodes lead or follow, want 9", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// guideCommands returns the lines of the ```sh blocks of a markdown file
// between two headings.
func guideCommands(t *testing.T, path, from, to string) []string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in, inSh := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == from:
			in = true
		case line == to:
			in = false
		case !in:
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh && strings.TrimSpace(line) != "":
			out = append(out, strings.TrimSpace(line))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
