package qmq

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/transport"
)

func TestPickPrefersWritableAvailableGroupsInTurn(t *testing.T) {
	rt := &route{Route: transport.Route{Groups: []transport.GroupRoute{
		{Name: "a", Writable: true, Available: true},
		{Name: "b", Writable: true, Available: true},
		{Name: "down", Writable: true, Available: false},
		{Name: "drained", Writable: false, Available: true},
	}}}
	seen := map[string]int{}
	for range 10 {
		seen[rt.pick(nil)]++
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Fatalf("picks %v, want a and b in turn", seen)
	}
	// A group that just failed is avoided while another will do.
	for range 4 {
		if g := rt.pick(map[string]bool{"a": true}); g != "b" {
			t.Fatalf("picked %s while avoiding a, want b", g)
		}
	}
	// With every available group avoided, an unavailable writable one is
	// tried; with all avoided, any writable one: never the drained group.
	if g := rt.pick(map[string]bool{"a": true, "b": true}); g != "down" {
		t.Fatalf("picked %s, want down", g)
	}
	if g := rt.pick(map[string]bool{"a": true, "b": true, "down": true}); g == "drained" || g == "" {
		t.Fatalf("picked %q with every writable group avoided", g)
	}
	rt.Groups = rt.Groups[3:]
	if g := rt.pick(nil); g != "" {
		t.Fatalf("picked %s when only a drained group remains", g)
	}
}

// TestSendsGoOnWhileTheMetaserverIsDown: a route past its time to live is
// asked for again only briefly; while the metaserver does not answer, sends
// go on to the broker group the cached route names.
func TestSendsGoOnWhileTheMetaserverIsDown(t *testing.T) {
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Error})
	fast := server.RaftTiming{HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		LeaderLease: 150 * time.Millisecond, SnapshotInterval: time.Minute, SnapshotThreshold: 1024, TrailingLogs: 1024}
	mcfg := server.DefaultMetaConfig()
	mcfg.ID, mcfg.DataDir, mcfg.Bootstrap, mcfg.Logger, mcfg.RaftTiming = "m1", t.TempDir(), true, logger, fast
	mcfg.ClientAddr, mcfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	m, err := server.NewMeta(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := server.DefaultConfig()
	cfg.ID, cfg.Group, cfg.DataDir, cfg.Bootstrap, cfg.Logger, cfg.RaftTiming = "n1", "g1", t.TempDir(), true, logger, fast
	cfg.ClientAddr, cfg.RaftAddr, cfg.Meta = "127.0.0.1:0", "127.0.0.1:0", []string{m.ClientAddr()}
	b, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	p, err := NewProducer(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.SendMessage(ctx, p.GenerateMessage("orders")); err != nil {
		t.Fatal(err)
	}
	m.Close()
	p.r.ttl = 0 // every route is stale from now on
	for range 3 {
		start := time.Now()
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.SendMessage(sctx, p.GenerateMessage("orders"))
		scancel()
		if err != nil {
			t.Fatalf("send with the metaserver down: %v", err)
		}
		if d := time.Since(start); d > staleRefresh+2*time.Second {
			t.Errorf("send took %s with the metaserver down; a stale route is refreshed for at most %s", d, staleRefresh)
		}
	}
}
