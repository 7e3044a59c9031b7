package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server"
)

// runCLI runs qmqctl with args and returns what it printed.
func runCLI(args ...string) (string, error) {
	app := newApp()
	var out bytes.Buffer
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run(append([]string{"qmqctl"}, args...))
	return out.String(), err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func quietLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.Discard})
}

// startCluster starts a one-node metaserver group and two one-node broker
// groups, g1 and g2, registered with it (a new subject lives in both), and
// returns the metaserver's client address once both groups are available.
func startCluster(t *testing.T) string {
	t.Helper()
	mcfg := server.DefaultMetaConfig()
	mcfg.ID, mcfg.DataDir, mcfg.Bootstrap = "m1", t.TempDir(), true
	mcfg.ClientAddr, mcfg.RaftAddr = "127.0.0.1:0", freeAddr(t)
	mcfg.SetElectionTimeout(300 * time.Millisecond)
	mcfg.Logger = quietLogger()
	m, err := server.NewMeta(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for _, g := range []string{"g1", "g2"} {
		cfg := server.DefaultConfig()
		cfg.ID, cfg.Group, cfg.DataDir, cfg.Bootstrap = g+"-n1", g, t.TempDir(), true
		cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", freeAddr(t)
		cfg.Meta, cfg.MetaHeartbeat = []string{m.ClientAddr()}, 100*time.Millisecond
		cfg.SetElectionTimeout(300 * time.Millisecond)
		cfg.Logger = quietLogger()
		n, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
	}
	a, err := qmq.NewAdmin(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := a.Cluster(ctx)
		cancel()
		ready := 0
		if err == nil {
			for _, g := range c.Groups {
				if g.Available && g.Writable && g.Leader != "" && len(g.Nodes) == 1 && g.Nodes[0].State == "Leader" {
					ready++
				}
			}
		}
		if ready == 2 {
			return m.ClientAddr()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broker groups never became available: %+v %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
