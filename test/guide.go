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

// A guide is a walkthrough of the docs run as an operator would run it:
// its commands in order, in a temporary directory, with a clean
// environment, each 127.0.0.1 address replaced by a free one (the same
// address each time it appears). `qmqd` lines start a process, kept until
// the test ends; `qmqctl` lines run to completion, retried while the
// nodes start (and, for a command the guide shows refused, until it is
// refused with the text shown); `export` lines set the environment of the
// lines after them.
type guide struct {
	t            *testing.T
	dir          string
	qmqd, qmqctl string
	env          []string
	addrs        map[string]string // the guide's address → the one used
	procs        []*exec.Cmd
	outputs      []string // of every qmqctl command, in order
}

// guideStep is one command of a guide, with the text its refusal must
// show when the guide says it fails ("# qmqctl: … TEXT" on the next line).
type guideStep struct {
	line, refusal string
}

var guideAddr = regexp.MustCompile(`127\.0\.0\.1:\d+`)

func newGuide(t *testing.T) *guide {
	g := &guide{t: t, dir: t.TempDir(), addrs: map[string]string{}}
	g.qmqd, g.qmqctl = Binaries(t)
	g.env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + g.dir}
	t.Cleanup(func() {
		for _, p := range g.procs {
			p.Process.Signal(syscall.SIGKILL)
			p.Wait()
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(g.dir, "*.log"))
			for _, l := range logs {
				t.Logf("---- %s ----\n%s", filepath.Base(l), tail(l, 40))
			}
		}
	})
	return g
}

// addr is the address used for the guide's address a.
func (g *guide) addr(a string) string {
	if g.addrs[a] == "" {
		g.addrs[a] = FreeAddr(g.t)
	}
	return g.addrs[a]
}

// run runs every step.
func (g *guide) run(steps []guideStep) {
	for i, s := range steps {
		g.step(i, s)
	}
}

func (g *guide) step(i int, s guideStep) {
	t := g.t
	line := guideAddr.ReplaceAllStringFunc(s.line, g.addr)
	fields := strings.Fields(line)
	switch fields[0] {
	case "export":
		for _, kv := range fields[1:] {
			if !strings.Contains(kv, "=") {
				t.Fatalf("guide line %q: %q is not NAME=VALUE", s.line, kv)
			}
			g.env = append(g.env, kv)
		}
	case "qmqd":
		logf, err := os.Create(filepath.Join(g.dir, fmt.Sprintf("%02d-qmqd-%s.log", i, fields[1])))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", "exec "+g.qmqd+line[len("qmqd"):])
		cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.Env = g.dir, logf, logf, g.env
		cmd.SysProcAttr = dieWithParent()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		g.procs = append(g.procs, cmd)
	case "qmqctl":
		var out []byte
		err := Poll(30*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", g.qmqctl+line[len("qmqctl"):])
			cmd.Dir, cmd.Env = g.dir, g.env
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
		g.outputs = append(g.outputs, string(out))
		t.Logf("$ %s\n%s", line, out)
	default:
		t.Fatalf("guide command %q is neither qmqd, qmqctl nor export", line)
	}
}

// guideSteps returns the commands of the ```sh blocks of a markdown file
// from the line from up to the line to (or, if to is "", the next heading
// of from's level), each with the refusal text of a "# qmqctl: … TEXT"
// line after it.
func guideSteps(t *testing.T, path, from, to string) []guideStep {
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
		case in && (to != "" && line == to || to == "" && strings.HasPrefix(line, level)):
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
