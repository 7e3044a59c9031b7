package admin_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/transport"
)

// A name that breaks the naming rule is qmq.ErrInvalidName in the admin
// too: found by the Client, or answered by the metaserver, a broker group or a
// group's leader (then still an INVALID *Error).
func TestInvalidNamesAreErrInvalidName(t *testing.T) {
	m := testcluster.Meta(t, nil)
	testcluster.Broker(t, testcluster.Registered("g1", m.ClientAddr()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	poll.Until(t, 30*time.Second, "the broker group registered with a leader", func() bool {
		c, err := a.Cluster(ctx)
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader != ""
	})
	if _, err := a.Assign(ctx, "orders", []string{"g1"}, 0); err != nil {
		t.Fatal(err)
	}
	bad := "orders created"
	check := func(what string, err error, answered bool) {
		t.Helper()
		if !errors.Is(err, qmq.ErrInvalidName) {
			t.Errorf("%s: %v, want ErrInvalidName", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), limits.ErrName.Error()) {
			t.Errorf("%s: %q no longer says what the naming rule said", what, err)
		}
		if answered && transport.CodeOf(err) != transport.Invalid {
			t.Errorf("%s: %v, no longer the server's INVALID", what, err)
		}
	}
	_, err = a.Route(ctx, bad)
	check("Route (the metaserver answers)", err, true)
	_, err = a.ForgetConsumerGroup(ctx, "orders", bad)
	check("ForgetConsumerGroup (the broker group answers)", err, true)
	err = a.Join(ctx, "g1", bad, "127.0.0.1:1", "127.0.0.1:2")
	check("Join (the group's leader answers)", err, true)
	_, err = a.ConsumerGroups(ctx, bad)
	check("ConsumerGroups", err, false)
	_, err = a.DeadLetters(ctx, "orders", bad, 0, 0)
	check("DeadLetters", err, false)
}

// A Client that reaches no node says so with qmq.ErrUnreachable.
func TestUnreachableIsErrUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	a, err := admin.New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = a.Cluster(ctx)
	if !errors.Is(err, qmq.ErrUnreachable) || !strings.Contains(err.Error(), "qmq: cannot reach "+addr) {
		t.Errorf("Cluster: %v, want ErrUnreachable naming %s", err, addr)
	}
}
