package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// oldNode runs a node that answers as one of the release before version
// gates does: Hello with an empty body, a cluster of one broker group g1
// on itself, an empty page to message listings (counted in listings) and
// UNKNOWN_TYPE to a set-version request.
func oldNode(t *testing.T, hello []byte, listings *atomic.Int32) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	s := &transport.Server{Handler: func(ctx context.Context, typ transport.Type, p []byte) ([]byte, error) {
		switch typ {
		case transport.TypeHello:
			return hello, nil
		case transport.TypeCluster:
			return json.Marshal(transport.Cluster{BrokerGroups: []transport.BrokerGroupStatus{{Name: "g1", Available: true, Leader: "n1",
				Nodes: []transport.NodeStatus{{ID: "n1", ClientAddr: addr}}}}})
		case transport.TypeRoute:
			return json.Marshal(transport.Route{Subject: "s", BrokerGroups: []transport.BrokerGroupRoute{{Name: "g1", Servers: []string{addr}, Leader: addr}}})
		case transport.TypeMessages:
			listings.Add(1)
			return json.Marshal(MessagePage{})
		}
		return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(typ))
	}}
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	t.Cleanup(func() { s.Close(); <-done })
	return addr
}

// Against a node of the release before version gates, a request that
// needs version 2 (a timeline, a listing by property, a raise of a
// group's version) is refused before it is sent, ErrUnsupported naming
// the node and what to do; a request it answers in full goes. Against a
// node that says it supports 2, the same requests go.
func TestNewFeaturesRefusedByAnOldNode(t *testing.T) {
	var listings atomic.Int32
	addr := oldNode(t, nil, &listings)
	a, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := "node " + addr + " runs a release that supports versions 1-1; "
	for what, call := range map[string]func() error{
		"a message's timeline": func() error { _, err := a.FindMessage(ctx, "m1", false, WithTimeline()); return err },
		"a listing by property": func() error {
			_, err := a.Messages(ctx, MessageQuery{Subject: "s", Since: time.Now().Add(-time.Hour), Property: "k", PropertyValue: "v"})
			return err
		},
		"raising a group's active version": func() error { _, err := a.SetVersion(ctx, "g1", 2); return err },
		"a backup": func() error {
			src, err := a.BackupSource(ctx, "g1")
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = src.Backup(ctx, transport.BackupRequest{Group: "g1"})
			return err
		},
	} {
		err := call()
		if !errors.Is(err, qmq.ErrUnsupported) || !strings.Contains(err.Error(), want+what+" needs version 2: upgrade it") {
			t.Errorf("%s: %v", what, err)
		}
	}
	if n := listings.Load(); n != 0 {
		t.Fatalf("%d listings reached the old node", n)
	}
	if _, err := a.FindMessage(ctx, "m1", false); err != nil || listings.Load() != 1 {
		t.Fatalf("a lookup without a timeline: %v, %d listings", err, listings.Load())
	}

	var newer atomic.Int32
	b, err := New(oldNode(t, (&transport.HelloResponse{Versions: version.Build()}).Encode(), &newer))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.FindMessage(ctx, "m1", false, WithTimeline()); err != nil || newer.Load() != 1 {
		t.Fatalf("a timeline from a node of %s: %v, %d listings", version.Build(), err, newer.Load())
	}
}
