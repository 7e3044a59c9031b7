package test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A node may run another build's qmqd than the cluster's (an earlier
// release's: Release), chosen by SetNodeBinary before its first start or
// by UseBinary before a restart. Its command line then holds only the
// flags that build knows: the harness, and the tests, pass flags of this
// build (--initial-version) that an earlier qmqd would refuse as a usage
// mistake. What each build knows is read from its --help.

// SetNodeBinary makes node id start on the qmqd at path, from its next
// start on ("": this build's). Call it before Start (or Form) for a
// node's first start.
func (c *Cluster) SetNodeBinary(id, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodeBins == nil {
		c.nodeBins = map[string]string{}
	}
	if path == "" || path == c.qmqd {
		delete(c.nodeBins, id)
		return
	}
	c.nodeBins[id] = path
}

// UseBinary makes the node start on the qmqd at path from its next start
// (Restart) on: "" for this build's.
func (n *Node) UseBinary(path string) { n.c.SetNodeBinary(n.ID, path) }

// Binary returns the path of the qmqd the node starts on.
func (n *Node) Binary() string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if b := n.c.nodeBins[n.ID]; b != "" {
		return b
	}
	return n.c.qmqd
}

// Terminate stops the node, if it runs, with SIGTERM (a leader hands
// over) and waits until it exited, SIGKILLing it after 30 s.
func (n *Node) Terminate() {
	n.c.t.Helper()
	if !n.Running() {
		return
	}
	n.ExpectExit()
	n.signal(syscall.SIGTERM)
	if exited, _ := n.AwaitExit(30 * time.Second); !exited {
		n.c.t.Logf("%s still ran 30s after SIGTERM: killed", n.ID)
	}
	n.Kill()
}

// binaryArgs returns the binary the node starts on and its command line:
// Args, less the flags that binary does not know (with their values).
func (n *Node) binaryArgs() (string, []string) {
	bin, args := n.Binary(), n.Args()
	if bin == n.c.qmqd {
		return bin, args
	}
	known, err := flagsOf(bin, args[0])
	if err != nil {
		n.c.t.Fatalf("node %s: %v", n.ID, err)
	}
	ours, err := flagsOf(n.c.qmqd, args[0])
	if err != nil {
		n.c.t.Fatalf("node %s: %v", n.ID, err)
	}
	kept, dropped := keepKnown(args, known, ours)
	if len(dropped) > 0 {
		n.c.t.Logf("node %s starts on %s, which does not know %s: left out", n.ID, bin, strings.Join(dropped, " "))
	}
	return bin, kept
}

// keepKnown returns args less every --flag that known lacks, with its
// value if the flag takes one (as ours, this build's, says: a flag unknown
// there too is left in, for the binary to refuse). args[0] is the command.
func keepKnown(args []string, known, ours map[string]bool) (kept, dropped []string) {
	kept = []string{args[0]}
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, _, inline := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		_, isKnown := known[name]
		takesValue, isOurs := ours[name]
		if !strings.HasPrefix(a, "--") || isKnown || !isOurs {
			kept = append(kept, a)
			continue
		}
		dropped = append(dropped, a)
		if takesValue && !inline && i+1 < len(args) {
			i++
			dropped = append(dropped, args[i])
		}
	}
	return kept, dropped
}

// helpFlag is one flag of a --help page: its names and, if it takes a
// value, its placeholder ("--data DIR", "--broker-group NAME, --group
// NAME", "--bootstrap").
var helpFlag = regexp.MustCompile(`^\s+((?:-{1,2}[a-z0-9-]+(?: [A-Z][^\s,]*(?:,[^\s,]+)*)?(?:, )?)+)\s`)

// flagNames finds the flags in one "--name VALUE, -n VALUE" run.
var flagNames = regexp.MustCompile(`--?([a-z0-9-]+)( [A-Z])?`)

// helps caches flagsOf's answers, by binary and command.
var helps sync.Map // "path command" → map[string]bool

// flagsOf returns the flags qmqd at bin knows for command (broker, meta,
// dev), each with whether it takes a value, from its --help.
func flagsOf(bin, command string) (map[string]bool, error) {
	key := bin + " " + command
	if m, ok := helps.Load(key); ok {
		return m.(map[string]bool), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, command, "--help").Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s --help: %w", bin, command, err)
	}
	m := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		f := helpFlag.FindStringSubmatch(line)
		if f == nil {
			continue
		}
		for _, n := range flagNames.FindAllStringSubmatch(f[1], -1) {
			m[n[1]] = n[2] != ""
		}
	}
	if !m["data"] || !m["id"] {
		return nil, fmt.Errorf("%s %s --help: no --id and --data among the flags read: %v", bin, command, m)
	}
	helps.Store(key, m)
	return m, nil
}
