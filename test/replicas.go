package test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// fsmFiles reads a broker node's state-machine logs (everything under
// DATA/fsm/data but the checkpoint, whose timing differs per node, and the
// schedule, whose emptied hours each node removes at its own checkpoints),
// by path relative to that directory.
func fsmFiles(n *Node) (map[string][]byte, error) {
	root := filepath.Join(n.DataDir, "fsm", "data")
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "schedule" {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "checkpoint" || strings.Contains(rel, ".tmp-") {
			return nil
		}
		b, err := os.ReadFile(path)
		out[rel] = b
		return err
	})
	return out, err
}

// SameReplicas waits until the group's nodes have applied the same index
// and stay there while their logs are read, then checks that every node
// holds byte-identical logs. The group must be idle (no client traffic).
func (c *Cluster) SameReplicas(timeout time.Duration) {
	c.t.Helper()
	c.WaitFor(timeout, c.Group+": every replica's logs are byte-identical", func() error {
		before, err := c.Converged()
		if err != nil {
			return err
		}
		files := map[string]map[string][]byte{}
		for _, n := range c.Nodes() {
			if files[n.ID], err = fsmFiles(n); err != nil {
				return err
			}
		}
		after, err := c.Converged()
		if err != nil {
			return err
		}
		for id, st := range after {
			if before[id].AppliedIndex != st.AppliedIndex {
				return fmt.Errorf("%s applied more while its logs were read", id)
			}
		}
		return sameFiles(files)
	})
}

// sameFiles reports the first difference between the nodes' files, or nil.
func sameFiles(files map[string]map[string][]byte) error {
	var first string
	for id := range files {
		if first == "" || id < first {
			first = id
		}
	}
	for id, theirs := range files {
		for rel, b := range files[first] {
			if other, ok := theirs[rel]; !ok {
				return fmt.Errorf("%s has %s, %s has not", first, rel, id)
			} else if !bytes.Equal(b, other) {
				return fmt.Errorf("%s differs between %s and %s (%d and %d bytes)", rel, first, id, len(b), len(other))
			}
		}
		if len(theirs) != len(files[first]) {
			return fmt.Errorf("%s has %d files, %s has %d", id, len(theirs), first, len(files[first]))
		}
	}
	return nil
}
