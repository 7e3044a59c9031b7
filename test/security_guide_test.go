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

// guideStep is one command of a guide, with the text its refusal must
// show when the guide says it fails ("# qmqctl: … TEXT" on the next line).
type guideStep struct {
	line, refusal string
}

// TestSecurityGuide follows docs/security.md's walkthrough as written: it
// runs every command of its shell blocks in order (each address replaced
// by a free one, in a temporary directory), expects each command the
// guide shows refused to fail with the text it shows, and every other to
// succeed.
func TestSecurityGuide(t *testing.T) {
	qmqd, qmqctl := Binaries(t)
	dir := t.TempDir()
	steps := guideSteps(t, "../docs/security.md", "## Walkthrough: a TLS cluster with applications")
	if len(steps) < 19 {
		t.Fatalf("found %d commands in the walkthrough, expected all of it", len(steps))
	}
	addrs := map[string]string{}
	rewrite := regexp.MustCompile(`127\.0\.0\.1:\d+`)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGKILL)
			p.Wait()
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
			for _, l := range logs {
				t.Logf("---- %s ----\n%s", filepath.Base(l), tail(l, 40))
			}
		}
	})
	var outputs []string
	for i, s := range steps {
		line := rewrite.ReplaceAllStringFunc(s.line, func(a string) string {
			if addrs[a] == "" {
				addrs[a] = FreeAddr(t)
			}
			return addrs[a]
		})
		fields := strings.Fields(line)
		switch fields[0] {
		case "export":
			for _, kv := range fields[1:] {
				if !strings.Contains(kv, "=") {
					t.Fatalf("guide line %q: %q is not NAME=VALUE", s.line, kv)
				}
				env = append(env, kv)
			}
		case "qmqd":
			logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("%02d-qmqd-%s.log", i, fields[1])))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", "-c", "exec "+qmqd+line[len("qmqd"):])
			cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.Env = dir, logf, logf, env
			cmd.SysProcAttr = dieWithParent()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			logf.Close()
			procs = append(procs, cmd)
		case "qmqctl":
			// A command the guide shows working may fail while the nodes
			// start (retried); a command it shows refused must fail with
			// the text shown (retried too: a change reaches the broker with
			// its next heartbeat).
			var out []byte
			err := Poll(30*time.Second, func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, "sh", "-c", qmqctl+line[len("qmqctl"):])
				cmd.Dir, cmd.Env = dir, env
				var err error
				out, err = cmd.CombinedOutput()
				switch {
				case s.refusal == "":
					return err
				case err == nil:
					return fmt.Errorf("succeeded, want refused with %q", s.refusal)
				case !strings.Contains(string(out), s.refusal):
					return fmt.Errorf("refused without %q", s.refusal)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("guide command %q: %v\n%s", line, err, out)
			}
			outputs = append(outputs, string(out))
			t.Logf("$ %s\n%s", line, out)
		default:
			t.Fatalf("guide command %q is neither qmqd, qmqctl nor export", line)
		}
	}
	all := strings.Join(outputs, "\n")
	for _, want := range []string{"order 1", "billing", "ops"} {
		if !strings.Contains(all, want) {
			t.Errorf("the guide's commands never printed %q", want)
		}
	}
	for _, f := range []string{"ops.secret", "billing.secret", "billing.secret.new"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
}

// guideSteps returns the commands of the ```sh blocks of a markdown file
// from a heading to the next heading of its level, each with the refusal
// text of a "# qmqctl: … TEXT" line after it.
func guideSteps(t *testing.T, path, from string) []guideStep {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []guideStep
	level := from[:strings.Index(from, " ")+1]
	in, inSh := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == from:
			in = true
		case in && strings.HasPrefix(line, level):
			in = false
		case !in:
		case strings.HasPrefix(line, "```sh"):
			inSh = true
		case strings.HasPrefix(line, "```"):
			inSh = false
		case !inSh || line == "":
		case strings.HasPrefix(line, "# qmqctl: … "):
			if len(out) == 0 {
				t.Fatalf("%s: a refusal before any command", path)
			}
			out[len(out)-1].refusal = strings.TrimPrefix(line, "# qmqctl: … ")
		case strings.HasPrefix(line, "#"):
		default:
			out = append(out, guideStep{line: line})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
