package test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Qmqd runs a qmqd command that starts no node (restore), bounded by
// 60 s, and returns its combined output.
func (c *Cluster) Qmqd(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.qmqd, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("qmqd %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Restore adds node id to the cluster from a backup file: `qmqd restore`
// seeds its new data directory as the only voter of the backup's group,
// then the node starts as any other, without --bootstrap. It returns the
// node and what qmqd restore printed.
func (c *Cluster) Restore(id, from string) (*Node, string) {
	c.t.Helper()
	if c.Node(id) != nil {
		c.t.Fatalf("node %s already exists", id)
	}
	n := &Node{
		ID: id, ClientAddr: FreeAddr(c.t), RaftAddr: FreeAddr(c.t), HTTPAddr: FreeAddr(c.t),
		DataDir: filepath.Join(c.dir, id, "data"), LogPath: filepath.Join(c.dir, id, "qmqd.log"), c: c,
	}
	if err := os.MkdirAll(filepath.Dir(n.LogPath), 0o755); err != nil {
		c.t.Fatal(err)
	}
	out, err := c.Qmqd("restore", "--from", from, "--data", n.DataDir, "--id", id, "--raft", n.RaftAddr, "--log-level", "warn")
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	n.start()
	return n, out
}
