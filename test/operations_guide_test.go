package test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOperationsGuide follows docs/operations.md from "Building a cluster
// from nothing" to the end of "Use it": it runs every command of those
// sections, in order, as an operator would, with each address replaced by
// a free one and data directories under a temporary directory. It then
// checks that the nine processes form the cluster the guide promises.
func TestOperationsGuide(t *testing.T) {
	steps := guideSteps(t, "../docs/operations.md", "## Building a cluster from nothing", "## Adding a broker group")
	if len(steps) < 15 {
		t.Fatalf("found %d commands in the guide, expected the whole walkthrough", len(steps))
	}
	g := newGuide(t)
	g.run(steps)
	if len(g.procs) != 9 {
		t.Fatalf("the guide started %d processes, want 9", len(g.procs))
	}
	all := strings.Join(g.outputs, "\n")
	for _, want := range []string{"2 broker groups", "first order", "group g1", "group g2"} {
		if !strings.Contains(all, want) {
			t.Errorf("the guide's commands never printed %q", want)
		}
	}
	// Once every node has reported, status shows nine nodes, all with a
	// known state.
	meta := g.addr("127.0.0.1:6301")
	err := Poll(20*time.Second, func() error {
		out, err := exec.Command(g.qmqctl, "--server", meta, "status", "--json").CombinedOutput()
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
