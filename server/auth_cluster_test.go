package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/test/testmsg"
	"github.com/qmqgo/qmq/transport"
)

// secureCluster is a metaserver node and a three-node broker group, all
// with TLS and authentication, the brokers heartbeating every hb; admin
// works with a node certificate, as an operator on a node's host would.
type secureCluster struct {
	t       *testing.T
	f       *tlsFixture
	meta    *MetaNode
	brokers []*Node
	admin   *admin.Client
	client  qmq.ConnOption // an application host's certificate, no application
	secrets map[string]string
}

func startSecureCluster(t *testing.T, hb time.Duration, tweak ...func(*Config)) *secureCluster {
	t.Helper()
	f := newTLSFixture(t)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.TLS, c.Auth = f.node("m1"), true })
	waitFor(t, 10*time.Second, "the metaserver to lead", func() bool { return m.Status().State == "Leader" })
	brokers := startGroup(t, withTLS(f), func(_ string, c *Config) {
		c.Auth, c.Meta, c.MetaHeartbeat = true, []string{m.ClientAddr()}, hb
		for _, f := range tweak {
			f(c)
		}
	})
	waitFor(t, 10*time.Second, "the brokers to register", func() bool {
		g, ok := m.fsm.BrokerGroup(brokers[0].cfg.BrokerGroup)
		return ok && len(g.Nodes) == len(brokers)
	})
	announced(t, m)
	return &secureCluster{t: t, f: f, meta: m, brokers: brokers, admin: newAdmin(t, m.ClientAddr(), connOf(m.cfg.TLS)),
		client: f.client("apps"), secrets: map[string]string{}}
}

// create creates an application and keeps its secret.
func (c *secureCluster) create(spec admin.AppSpec) {
	c.t.Helper()
	secret, err := c.admin.CreateApp(ctxFor(c.t, 30*time.Second), spec)
	if err != nil {
		c.t.Fatalf("create %s: %v", spec.Code, err)
	}
	c.secrets[spec.Code] = secret
}

// as is how a client of app connects ("" for none, "wrong:CODE" for a
// wrong secret).
func (c *secureCluster) as(app string) qmq.ConnOption {
	switch {
	case app == "":
		return c.client
	case strings.HasPrefix(app, "wrong:"):
		return c.client.And(qmq.WithApp(strings.TrimPrefix(app, "wrong:"), "qmqs_wrong"))
	}
	return c.client.And(qmq.WithApp(app, c.secrets[app]))
}

// clientTLS is the application host's certificate, for a raw transport
// dial.
func (c *secureCluster) clientTLS(t *testing.T) func() *tls.Config { return c.f.dialTLS(t, "apps") }

// dialTLS is the client side of name's certificate, for a raw transport
// dial.
func (f *tlsFixture) dialTLS(t *testing.T, name string) func() *tls.Config {
	r, err := tlsconf.Load(tlsconf.Files(f.files(name)), tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Client
}

// leaderHolding returns the broker group's first node, its leader, once
// it holds the applications created so far.
func (c *secureCluster) leaderHolding(t *testing.T) *Node {
	t.Helper()
	version, leader := c.meta.fsm.Apps().Version(), c.brokers[0]
	waitFor(t, 10*time.Second, "the leader to hold the applications", func() bool { return leader.apps.Load().Version() == version })
	return leader
}

// dialAs is a raw connection to b as application app, closed at cleanup.
func (c *secureCluster) dialAs(t *testing.T, ctx context.Context, b *Node, app string) *transport.Conn {
	t.Helper()
	conn, err := transport.Dialer{TLS: c.clientTLS(t), Credentials: &transport.Credentials{App: app, Secret: c.secrets[app]}}.Dial(ctx, b.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// servers is every node's client address.
func (c *secureCluster) servers() string {
	addrs := []string{c.meta.ClientAddr()}
	for _, b := range c.brokers {
		addrs = append(addrs, b.ClientAddr())
	}
	return strings.Join(addrs, ",")
}

// lastIndexes is every node's Raft last index, once every node has
// applied all of its log: equal before and after a request means the
// request proposed nothing anywhere.
func (c *secureCluster) lastIndexes() string {
	c.t.Helper()
	var s string
	waitFor(c.t, 10*time.Second, "every node to apply its log", func() bool {
		s = fmt.Sprintf("meta %d/%d", c.meta.raft.LastIndex(), c.meta.fsm.Applied())
		settled := c.meta.raft.LastIndex() == c.meta.fsm.Applied()
		for _, b := range c.brokers {
			s += fmt.Sprintf(", %s %d/%d", b.cfg.ID, b.raft.LastIndex(), b.fsm.Applied())
			settled = settled && b.raft.LastIndex() == b.fsm.Applied()
		}
		return settled
	})
	return s
}

// TestAuthTable checks (application, operation, subject) cases through
// the SDK on a three-node broker group with a metaserver: each is served
// or refused with the code it must be, and a refused one proposes
// nothing on any node (every node's Raft log ends where it did).
func TestAuthTable(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "ops", Admin: true})
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders.*"}, Consume: []admin.ConsumeGrant{{Subject: "orders.*", ConsumerGroup: "billing"}}})
	c.create(admin.AppSpec{Code: "auditor", Consume: []admin.ConsumeGrant{{Subject: "orders.*", ConsumerGroup: "audit"}}})
	c.create(admin.AppSpec{Code: "reader"})
	version := c.meta.fsm.Apps().Version()
	waitFor(t, 10*time.Second, "every broker to hold the applications", func() bool {
		for _, b := range c.brokers {
			if b.apps.Load().Version() != version {
				return false
			}
		}
		return true
	})

	send := func(subject string) func(ctx context.Context, o qmq.ConnOption) error {
		return func(ctx context.Context, o qmq.ConnOption) error {
			p, err := qmq.NewProducer(c.servers(), o, qmq.WithSendTimeout(10*time.Second))
			if err != nil {
				return err
			}
			defer p.Close()
			m := p.GenerateMessage(subject)
			m.SetBody([]byte("x"))
			return p.SendMessage(ctx, m)
		}
	}
	pull := func(subject, group string) func(ctx context.Context, o qmq.ConnOption) error {
		return func(ctx context.Context, o qmq.ConnOption) error {
			p, err := qmq.NewPuller(c.servers(), subject, group, o, qmq.WithLogger(nil))
			if err != nil {
				return err
			}
			defer p.Close()
			_, err = p.Pull(ctx, 1, 10*time.Millisecond)
			return err
		}
	}
	adm := func(op func(ctx context.Context, a *admin.Client) error) func(ctx context.Context, o qmq.ConnOption) error {
		return func(ctx context.Context, o qmq.ConnOption) error {
			a, err := admin.New(c.servers(), o)
			if err != nil {
				return err
			}
			defer a.Close()
			return op(ctx, a)
		}
	}
	apps := adm(func(ctx context.Context, a *admin.Client) error { _, err := a.Apps(ctx); return err })
	cluster := adm(func(ctx context.Context, a *admin.Client) error { _, err := a.Cluster(ctx); return err })
	forget := adm(func(ctx context.Context, a *admin.Client) error {
		_, err := a.ForgetConsumerGroup(ctx, "orders.paid", "gone")
		return err
	})
	for _, tc := range []struct {
		app, op string
		do      func(ctx context.Context, o qmq.ConnOption) error
		want    error // nil, qmq.ErrUnauthenticated or qmq.ErrPermissionDenied
		says    string
	}{
		{"billing", "send orders.paid", send("orders.paid"), nil, ""},
		{"billing", "pull orders.paid as billing", pull("orders.paid", "billing"), nil, ""},
		{"billing", "send payments", send("payments"), qmq.ErrPermissionDenied, "application billing may neither send to nor consume subject payments"},
		{"billing", "pull orders.paid as audit", pull("orders.paid", "audit"), qmq.ErrPermissionDenied, "may not consume subject orders.paid as consumer group audit"},
		{"billing", "list applications", apps, qmq.ErrPermissionDenied, "application billing is not an admin"},
		{"billing", "forget a consumer group", forget, qmq.ErrPermissionDenied, "is not an admin"},
		{"billing", "cluster", cluster, nil, ""},
		// auditor may look the subject up (it consumes it) but not send:
		// the broker refuses the message itself.
		{"auditor", "send orders.paid", send("orders.paid"), qmq.ErrPermissionDenied, "application auditor may not send to subject orders.paid"},
		{"auditor", "pull orders.paid as audit", pull("orders.paid", "audit"), nil, ""},
		{"reader", "send orders.paid", send("orders.paid"), qmq.ErrPermissionDenied, "application reader may neither send to nor consume"},
		{"reader", "cluster", cluster, nil, ""},
		{"ops", "send payments", send("payments"), nil, ""},
		{"ops", "list applications", apps, nil, ""},
		{"ops", "forget a consumer group", forget, nil, ""},
		{"", "cluster", cluster, qmq.ErrUnauthenticated, "connect with the application's code and secret"},
		{"", "send orders.paid", send("orders.paid"), qmq.ErrUnauthenticated, ""},
		{"wrong:billing", "send orders.paid", send("orders.paid"), qmq.ErrUnauthenticated, `application "billing" is unknown, or its secret wrong or expired`},
		{"wrong:nobody", "pull orders.paid as billing", pull("orders.paid", "billing"), qmq.ErrUnauthenticated, `application "nobody" is unknown, or its secret wrong or expired`},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.app, tc.op), func(t *testing.T) {
			before := c.lastIndexes()
			err := tc.do(ctxFor(t, 30*time.Second), c.as(tc.app))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want %v saying %q", err, tc.want, tc.says)
			}
			if after := c.lastIndexes(); after != before {
				t.Fatalf("a refused request changed the Raft logs: %s, then %s", before, after)
			}
		})
	}
}

// TestPermissionChangeReachesBrokers: a change of an application reaches
// every broker node by its next heartbeat to the metaserver. With a
// heartbeat of hb, every node holds the new table, and a producer
// already connected is refused, within hb and a second of slack (the
// docs say: one heartbeat interval and a round trip).
func TestPermissionChangeReachesBrokers(t *testing.T) {
	const hb = 200 * time.Millisecond
	c := startSecureCluster(t, hb)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders.*"}})
	p, err := qmq.NewProducer(c.servers(), c.as("billing"), qmq.WithSendTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxFor(t, 60*time.Second)
	sendOne := func() error {
		m := p.GenerateMessage("orders.paid")
		m.SetBody([]byte("x"))
		return p.SendMessage(ctx, m)
	}
	if err := sendOne(); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.UpdateApp(ctx, admin.AppSpec{Code: "billing", Send: []string{"invoices"}}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	version := c.meta.fsm.Apps().Version()
	waitFor(t, hb+time.Second, "every broker node to hold the changed applications", func() bool {
		for _, b := range c.brokers {
			if b.apps.Load().Version() != version {
				return false
			}
		}
		return true
	})
	// The producer holds the route and its connections: only the broker
	// can refuse it now.
	if err := sendOne(); !errors.Is(err, qmq.ErrPermissionDenied) {
		t.Fatalf("a send after the right was taken away: %v", err)
	}
	t.Logf("the change reached every broker and refused the producer %v after it was made (heartbeat %v)", time.Since(changed).Round(time.Millisecond), hb)
}

// TestAppGroupLimitOnPull: a client that pulls from a broker directly,
// without asking for the route, cannot create consumer groups past its
// application's limit: the broker has the metaserver record a new group
// first, and the pull past the limit is refused without creating it.
func TestAppGroupLimitOnPull(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders"}, Consume: []admin.ConsumeGrant{{Subject: "orders", ConsumerGroup: "*"}}, MaxConsumerGroups: 1})
	ctx := ctxFor(t, 30*time.Second)
	leader := c.leaderHolding(t)
	conn := c.dialAs(t, ctx, leader, "billing")
	pullAs := func(group string) error {
		req := &transport.PullRequest{Subject: "orders", ConsumerGroup: group, Consumer: "c1", Max: 1, Wait: 10 * time.Millisecond}
		_, err := conn.Call(ctx, transport.TypePull, req.Encode())
		return err
	}
	if err := pullAs("first"); err != nil {
		t.Fatalf("the first group: %v", err)
	}
	err := pullAs("second")
	if transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), "application billing") {
		t.Fatalf("a second group past a limit of one: %v, want INVALID naming the application's limit", err)
	}
	if leader.fsm.HasConsumerGroup("orders", "second") {
		t.Fatal("the refused pull created its group")
	}
	if !leader.fsm.HasConsumerGroup("orders", "first") {
		t.Fatal("the first pull created no group")
	}
}

// TestAppGroupLimitComesBack: the consumer groups a broker group forgets
// by itself (one created by a pull before its subject had a message, gone
// with its consumer; an idle broadcast group) stop counting against their
// application's limit at the metaserver, so an application coming and
// going within its limit never runs out of it; a group a consumer declared
// (by asking for its route) stays counted.
func TestAppGroupLimitComesBack(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond, func(c *Config) { c.SessionTimeout = 300 * time.Millisecond })
	c.create(admin.AppSpec{Code: "billing", Send: []string{"*"}, Consume: []admin.ConsumeGrant{{Subject: "*", ConsumerGroup: "*"}}, MaxConsumerGroups: 1})
	ctx := ctxFor(t, 60*time.Second)
	leader := c.leaderHolding(t)
	conn := c.dialAs(t, ctx, leader, "billing")
	pull := func(subject, group string, idle time.Duration) error {
		req := &transport.PullRequest{Subject: subject, ConsumerGroup: group, Consumer: "c1", Max: 1, Wait: 10 * time.Millisecond, IdleExpiry: idle}
		_, err := conn.Call(ctx, transport.TypePull, req.Encode())
		return err
	}
	gone := func(subject, group string) {
		t.Helper()
		waitFor(t, 20*time.Second, "group "+group+" to be forgotten and its record with it", func() bool {
			r, _ := c.meta.fsm.Route(subject)
			return !leader.fsm.HasConsumerGroup(subject, group) && !slices.Contains(r.Consumers, group) && c.meta.fsm.Usage("billing").Groups == 0
		})
	}
	// A subject without messages: each group goes with its consumer.
	for _, g := range []string{"p1", "p2", "p3"} {
		if err := pull("empty", g, 0); err != nil {
			t.Fatalf("group %s: %v", g, err)
		}
		gone("empty", g)
	}
	// Idle broadcast groups of a subject with messages.
	p, err := qmq.NewProducer(c.servers(), c.as("billing"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendMessage(ctx, p.GenerateMessage("full")); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"b1", "b2"} {
		if err := pull("full", g, time.Second); err != nil {
			t.Fatalf("group %s: %v", g, err)
		}
		gone("full", g)
	}
	// Declared: asking for the route records the group for good.
	route, _ := json.Marshal(transport.RouteRequest{Subject: "full", ConsumerGroup: "d"})
	if _, err := conn.Call(ctx, transport.TypeRoute, route); err != nil {
		t.Fatal(err)
	}
	if err := pull("full", "d", time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the declared group to be idle and forgotten at the broker", func() bool { return !leader.fsm.HasConsumerGroup("full", "d") })
	if u := c.meta.fsm.Usage("billing"); u.Groups != 1 {
		t.Fatalf("a declared group forgotten at the broker: usage %+v", u)
	}
	if err := pull("full", "another", 0); transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("a group past the limit: %v", err)
	}
}

// TestRefusedPullGivesItsGroupBack: a pull the broker group refuses (here
// at the application's consumer limit) after the metaserver recorded its
// group gives the record back, since the group never came to exist.
func TestRefusedPullGivesItsGroupBack(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond, func(c *Config) { c.SessionTimeout = 300 * time.Millisecond })
	c.create(admin.AppSpec{Code: "billing", Consume: []admin.ConsumeGrant{{Subject: "*", ConsumerGroup: "*"}}, MaxConsumerGroups: 3, MaxConsumers: 1})
	ctx := ctxFor(t, 60*time.Second)
	leader := c.leaderHolding(t)
	conn := c.dialAs(t, ctx, leader, "billing")
	pull := func(group, consumer string) error {
		req := &transport.PullRequest{Subject: "empty", ConsumerGroup: group, Consumer: consumer, Max: 1, Wait: 10 * time.Millisecond}
		_, err := conn.Call(ctx, transport.TypePull, req.Encode())
		return err
	}
	if err := pull("a", "c1"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"b", "c"} {
		if err := pull(g, "c2"); transport.CodeOf(err) != transport.Invalid {
			t.Fatalf("a second consumer past a limit of one: %v", err)
		}
	}
	// a goes with its consumer (a subject without messages); b and c never were.
	waitFor(t, 20*time.Second, "every record of billing's to go", func() bool {
		r, _ := c.meta.fsm.Route("empty")
		return !leader.fsm.HasConsumerGroup("empty", "a") && len(r.Consumers) == 0 && c.meta.fsm.Usage("billing").Groups == 0
	})
}

// TestLateForgetReportLeavesARecreatedGroup: a report that a group was
// forgotten, still on its way when the group is created again, does not
// take the new group's record (an application could otherwise pass its
// limit of groups).
func TestLateForgetReportLeavesARecreatedGroup(t *testing.T) {
	// The reports are held back, as a slow or electing metaserver would
	// hold them (a report is retried for about half a minute).
	hold := make(chan struct{})
	c := startSecureCluster(t, 100*time.Millisecond, func(c *Config) {
		c.SessionTimeout, c.holdForgetReports = 300*time.Millisecond, hold
	})
	c.create(admin.AppSpec{Code: "billing", Consume: []admin.ConsumeGrant{{Subject: "*", ConsumerGroup: "*"}}, MaxConsumerGroups: 1})
	ctx := ctxFor(t, 60*time.Second)
	leader := c.leaderHolding(t)
	conn := c.dialAs(t, ctx, leader, "billing")
	pull := func(group string) error {
		req := &transport.PullRequest{Subject: "empty", ConsumerGroup: group, Consumer: "c1", Max: 1, Wait: 10 * time.Millisecond}
		_, err := conn.Call(ctx, transport.TypePull, req.Encode())
		return err
	}
	held := leader.forgotten
	if err := pull("p1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "p1 to be forgotten at the broker", func() bool { return !leader.fsm.HasConsumerGroup("empty", "p1") && len(held.queue) == 1 })
	if err := pull("p1"); err != nil || !leader.fsm.HasConsumerGroup("empty", "p1") {
		t.Fatalf("p1 created again: %v", err)
	}
	close(hold)
	waitFor(t, 10*time.Second, "the report, stale, to be dropped", func() bool { return held.stale.Load() == 1 })
	if err := pull("p2"); transport.CodeOf(err) != transport.Invalid {
		t.Fatalf("a second group past a limit of one, p1 existing: %v (usage %+v)", err, c.meta.fsm.Usage("billing"))
	}
}

// TestAppConsumerAndDelayedLimits: an application's limits of consumers
// registered and of delayed messages pending in a broker group hold for
// requests straight to its leader, naming the limit; another application
// is not held back.
func TestAppConsumerAndDelayedLimits(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"*"}, Consume: []admin.ConsumeGrant{{Subject: "*", ConsumerGroup: "*"}}, MaxConsumers: 2, MaxDelayed: 2})
	c.create(admin.AppSpec{Code: "ops", Send: []string{"*"}, Consume: []admin.ConsumeGrant{{Subject: "*", ConsumerGroup: "*"}}})
	ctx := ctxFor(t, 60*time.Second)
	leader := c.leaderHolding(t)
	billing, ops := c.dialAs(t, ctx, leader, "billing"), c.dialAs(t, ctx, leader, "ops")
	pull := func(conn *transport.Conn, consumer string) error {
		req := &transport.PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: consumer, Max: 1, Wait: 10 * time.Millisecond}
		_, err := conn.Call(ctx, transport.TypePull, req.Encode())
		return err
	}
	for _, consumer := range []string{"c1", "c2"} {
		if err := pull(billing, consumer); err != nil {
			t.Fatalf("billing's consumer %s: %v", consumer, err)
		}
	}
	if err := pull(billing, "c3"); transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), "application billing has 2 consumers registered") {
		t.Fatalf("billing's third consumer: %v", err)
	}
	if err := pull(ops, "c3"); err != nil {
		t.Fatalf("ops's consumer: %v", err)
	}
	sent := 0
	send := func(conn *transport.Conn, n int, delay time.Duration) []transport.SendResult {
		req := &transport.SendRequest{}
		for range n {
			sent++
			m := testmsg.OfSize(fmt.Sprintf("m%d", sent), "s", time.Now().Add(delay).UnixMilli(), 64)
			if delay == 0 {
				m.DeliverAt = 0
			}
			req.Messages = append(req.Messages, m)
		}
		b, err := conn.Call(ctx, transport.TypeSend, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodeSendResponse(b)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Results
	}
	res := send(billing, 3, time.Hour)
	if res[0].Status != transport.SendScheduled || res[1].Status != transport.SendScheduled || res[2].Status != transport.SendRejected ||
		!strings.Contains(res[2].Error, "application billing has 2 delayed messages pending") {
		t.Fatalf("billing's three delayed messages: %+v", res)
	}
	if res := send(billing, 1, 0); res[0].Status != transport.SendAppended {
		t.Fatalf("billing's immediate message: %+v", res)
	}
	if res := send(ops, 3, time.Hour); res[2].Status != transport.SendScheduled {
		t.Fatalf("ops's delayed messages: %+v", res)
	}
}

// TestNewAppUsableAtOnce: an application created after a broker's last
// heartbeat can say Hello to that broker at once (the broker asks the
// metaserver again before refusing), and a client saying wrong secrets in
// a loop makes the broker ask at most once a second.
func TestNewAppUsableAtOnce(t *testing.T) {
	c := startSecureCluster(t, time.Hour) // no heartbeat after the first
	b := c.brokers[1]
	waitFor(t, 10*time.Second, "the first heartbeat's applications", func() bool { return b.apps.Load() != nil })
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders"}})
	ctx := ctxFor(t, 30*time.Second)
	dial := func(secret string) error {
		conn, err := transport.Dialer{TLS: c.clientTLS(t), Credentials: &transport.Credentials{App: "billing", Secret: secret}}.Dial(ctx, b.ClientAddr())
		if err == nil {
			// The Hello's answer carried the node's versions.
			if r, err := conn.Versions(ctx); err != nil || r != version.Build() {
				t.Errorf("versions after a hello that held: %s, %v", r, err)
			}
			conn.Close()
		}
		return err
	}
	if err := dial(c.secrets["billing"]); err != nil {
		t.Fatalf("a new application's first hello to a broker that had not heard of it: %v", err)
	}
	heartbeats := func() float64 {
		return labeledCounter(t, c.meta.registry, "qmq_meta_requests_total", "type", transport.TypeBrokerHeartbeat.String())
	}
	before, start := heartbeats(), time.Now()
	for range 20 {
		if err := dial("qmqs_wrong"); transport.CodeOf(err) != transport.Unauthenticated {
			t.Fatalf("a wrong secret: %v", err)
		}
	}
	asked := heartbeats() - before
	if limit := 1 + time.Since(start).Seconds(); asked > limit {
		t.Fatalf("20 wrong secrets made the broker ask the metaserver %v times in %v", asked, time.Since(start))
	}
}

// TestAuthHTTP: with --auth and client certificates only requested, the
// HTTP port requires a client certificate of the CA; with --open-http it
// serves /status and /metrics without one.
func TestAuthHTTP(t *testing.T) {
	fx := newTLSFixture(t)
	fx.issue("app", tlsconf.Spec{CN: "app"})
	noCert := fx.config("app")
	noCert.CertFile, noCert.KeyFile = "", ""
	get := func(config *tls.Config, url string) error {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: config}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	for _, open := range []bool{false, true} {
		m := startMeta(t, fmt.Sprintf("m-open-%v", open), true, func(c *MetaConfig) {
			c.TLS, c.Auth, c.OpenHTTP, c.HTTPAddr = fx.node("m1"), true, open, freeAddr(t)
			c.TLS.ClientAuth = "request"
		})
		url := "https://" + m.HTTPAddr() + "/metrics"
		if err := get(clientConfig(t, fx.config("app")), url); err != nil {
			t.Errorf("open-http %v: /metrics with a client certificate: %v", open, err)
		}
		err := get(clientConfig(t, noCert), url)
		if open && err != nil {
			t.Errorf("open-http: /metrics without a client certificate: %v", err)
		}
		if !open && err == nil {
			t.Error("/metrics without a client certificate served, with --auth and no --open-http")
		}
	}
}

// TestAppSubjectLimitOnSend: a client that sends to a broker directly,
// without asking for the route, cannot create subjects past its
// application's limit: the broker has the metaserver create each new
// subject's route first, and a message past the limit is rejected
// (INVALID, naming the limit) without being stored.
func TestAppSubjectLimitOnSend(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"s.*"}, MaxSubjects: 1})
	leader := c.leaderHolding(t)
	ctx := ctxFor(t, 30*time.Second)
	conn := c.dialAs(t, ctx, leader, "billing")
	sent := 0
	send := func(subject string) transport.SendResult {
		t.Helper()
		sent++
		req := &transport.SendRequest{Messages: []*message.Message{testmsg.OfSize(fmt.Sprintf("id-%d", sent), subject, 0, 100)}}
		b, err := conn.Call(ctx, transport.TypeSend, req.Encode())
		for transport.CodeOf(err) == transport.NotLeader && ctx.Err() == nil {
			// A loaded machine moved the leadership: to the new leader.
			waitFor(t, 10*time.Second, "a leader", func() bool { return leaderOf(c.brokers) != nil })
			leader = leaderOf(c.brokers)
			conn = c.dialAs(t, ctx, leader, "billing")
			b, err = conn.Call(ctx, transport.TypeSend, req.Encode())
		}
		if err != nil {
			t.Fatalf("send to %s: %v", subject, err)
		}
		resp, err := transport.DecodeSendResponse(b)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Results[0]
	}
	if r := send("s.0"); r.Status != transport.SendAppended {
		t.Fatalf("the first subject: %+v", r)
	}
	for _, s := range []string{"s.1", "s.2"} {
		r := send(s)
		if e := transport.ParseRejection(r.Error); r.Status != transport.SendRejected || e == nil || e.Code != transport.Invalid || !strings.Contains(e.Message, "max subjects") {
			t.Fatalf("a subject past a limit of one: %+v", r)
		}
		if leader.fsm.HasSubject(s) {
			t.Fatalf("the rejected message to %s was stored", s)
		}
	}
	if r := send("s.0"); r.Status != transport.SendAppended {
		t.Fatalf("the application's own subject again: %+v", r)
	}
}

// TestBrokerWithoutAuthUnderAuthMetaserver: a broker without --auth
// whose metaserver checks applications learns it from its heartbeat and
// then serves no client: it would otherwise run, and forward as a node,
// what every other node refuses (creating an admin application, say).
func TestBrokerWithoutAuthUnderAuthMetaserver(t *testing.T) {
	f := newTLSFixture(t)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.TLS, c.Auth = f.node("m1"), true })
	b := startNode(t, "g1-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat, c.TLS = "g1", []string{m.ClientAddr()}, 100*time.Millisecond, f.node("g1-n1")
	})
	waitFor(t, 10*time.Second, "the broker to learn that its metaserver checks applications", func() bool { return b.Status().Refusing != "" })
	f.client("apps")
	client := f.dialTLS(t, "apps")
	ctx := ctxFor(t, 30*time.Second)
	conn, err := transport.Dialer{TLS: client}.Dial(ctx, b.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(transport.AppRequest{Code: "evil", Admin: true, Create: true})
	if _, err := conn.Call(ctx, transport.TypeAppPut, body); transport.CodeOf(err) != transport.Unavailable || !strings.Contains(err.Error(), "restarted with --auth") {
		t.Fatalf("an admin application created through a broker without --auth: %v", err)
	}
	if m.fsm.Apps().App("evil") != nil {
		t.Fatal("the application was created")
	}
	if _, err := conn.Call(ctx, transport.TypeSend, (&transport.SendRequest{}).Encode()); transport.CodeOf(err) != transport.Unavailable {
		t.Fatalf("a send through the broker: %v", err)
	}
}

// An --auth broker under a metaserver that checks no applications would
// take its table from a metaserver where any holder of a client
// certificate can create an admin application: it serves no client while
// that lasts (nodes still reach it), says why, and serves again once the
// metaserver checks.
func TestAuthBrokerUnderOpenMetaserver(t *testing.T) {
	f := newTLSFixture(t)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.TLS = f.node("m1") })
	waitFor(t, 10*time.Second, "the metaserver to lead", func() bool { return m.Status().State == "Leader" })
	adm := newAdmin(t, m.ClientAddr(), f.client("apps"))
	ctx := ctxFor(t, 30*time.Second)
	// Anyone with a client certificate: the metaserver checks nothing.
	secret, err := adm.CreateApp(ctx, admin.AppSpec{Code: "evil", Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	b := startNode(t, "g1-n1", true, func(c *Config) {
		c.BrokerGroup, c.Meta, c.MetaHeartbeat, c.TLS, c.Auth = "g1", []string{m.ClientAddr()}, 100*time.Millisecond, f.node("g1-n1"), true
	})
	waitFor(t, 10*time.Second, "the broker to hear from its metaserver", func() bool { return b.Status().Refusing != "" || b.apps.Load() != nil })
	conn, err := transport.Dialer{TLS: f.dialTLS(t, "apps")}.Dial(ctx, b.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hello := (&transport.HelloRequest{App: "evil", Secret: secret}).Encode()
	if _, err := conn.Call(ctx, transport.TypeHello, hello); transport.CodeOf(err) != transport.Unavailable || !strings.Contains(err.Error(), "metaserver checks no applications") {
		t.Fatalf("a Hello of an application made on an open metaserver: %v", err)
	}
	if _, err := conn.Call(ctx, transport.TypeSend, (&transport.SendRequest{}).Encode()); transport.CodeOf(err) != transport.Unavailable {
		t.Fatalf("a send: %v", err)
	}
	// A node (here the metaserver's own certificate) still reaches it.
	nodeConn, err := transport.Dialer{TLS: f.dialTLS(t, "m1")}.Dial(ctx, b.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer nodeConn.Close()
	if _, err := nodeConn.Call(ctx, transport.TypeStatus, nil); err != nil {
		t.Fatalf("a node's status request: %v", err)
	}
	waitFor(t, 10*time.Second, "the metaserver's view to say the broker refuses clients", func() bool {
		g := m.srv.Cluster().BrokerGroups
		return len(g) == 1 && len(g[0].Nodes) == 1 && strings.Contains(g[0].Nodes[0].Refusing, "metaserver checks no applications")
	})
	// The metaserver is restarted checking: the broker serves applications
	// again, without a restart of its own.
	cfg := m.cfg
	m.Close()
	cfg.Auth, cfg.Bootstrap = true, false
	if m, err = NewMeta(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	waitFor(t, 10*time.Second, "the broker to serve clients again", func() bool { return b.Status().Refusing == "" })
	if _, err := conn.Call(ctx, transport.TypeHello, hello); err != nil {
		t.Fatalf("a Hello once the metaserver checks: %v", err)
	}
}

// A drained group's refusal tells an application nothing about messages
// of subjects it may not send to: those are refused for the right first,
// never answered as duplicates of what the group holds.
func TestRefusalChecksTheRightToSendFirst(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"invoices"}})
	c.create(admin.AppSpec{Code: "ops", Send: []string{"orders"}})
	ctx := ctxFor(t, 60*time.Second)
	leader := c.leaderHolding(t)
	ops, billing := c.dialAs(t, ctx, leader, "ops"), c.dialAs(t, ctx, leader, "billing")
	send := func(conn *transport.Conn, subject string) (*transport.SendResponse, error) {
		req := &transport.SendRequest{Messages: []*message.Message{{ID: "order-1", Subject: subject, CreatedAt: 1, Body: []byte("x")}}}
		body, err := conn.Call(ctx, transport.TypeSend, req.Encode())
		if err != nil {
			return nil, err
		}
		return transport.DecodeSendResponse(body)
	}
	if _, err := send(ops, "orders"); err != nil {
		t.Fatal(err)
	}
	leader.writable.Store(false) // drained
	resp, err := send(billing, "orders")
	if err != nil || len(resp.Results) != 1 || resp.Results[0].Status != transport.SendRejected ||
		transport.CodeOf(transport.ParseRejection(resp.Results[0].Error)) != transport.PermissionDenied {
		t.Fatalf("billing's send of a subject it may not send to, to a drained group holding the id: %+v, %v; want PERMISSION_DENIED", resp, err)
	}
	if resp, err := send(ops, "orders"); err != nil || resp.Results[0].Status != transport.SendDuplicate {
		t.Fatalf("ops's own resend to the drained group: %+v, %v; want a duplicate", resp, err)
	}
}

// TestMessagesReadRights: with authentication on, an application reads
// the stored messages of the subjects it may use and no other: it lists
// its own subject, is refused another's (PERMISSION_DENIED, saying why,
// through admin and asking a broker directly), and looking up another
// subject's message by id finds nothing; an admin finds both.
func TestMessagesReadRights(t *testing.T) {
	c := startSecureCluster(t, 100*time.Millisecond)
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders.*"}, Consume: []admin.ConsumeGrant{{Subject: "orders.*", ConsumerGroup: "billing"}}})
	c.create(admin.AppSpec{Code: "shipping", Send: []string{"parcels"}})
	leader := c.leaderHolding(t)
	ctx := ctxFor(t, 60*time.Second)
	send := func(app, subject, id string) {
		t.Helper()
		p, err := qmq.NewProducer(c.servers(), c.as(app), qmq.WithSendTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		m := p.GenerateMessage(subject)
		if err := m.SetID(id); err != nil {
			t.Fatal(err)
		}
		m.SetBody([]byte("x"))
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("%s sends to %s: %v", app, subject, err)
		}
	}
	send("billing", "orders.paid", "o1")
	send("shipping", "parcels", "p1")

	billing := newAdmin(t, c.servers(), c.as("billing"))
	zero := int64(0)
	pages, err := billing.Messages(ctx, admin.MessageQuery{Subject: "orders.paid", FromSeq: &zero})
	if err != nil || len(pages) != 1 || len(pages[0].Messages) != 1 || pages[0].Messages[0].ID != "o1" {
		t.Fatalf("billing lists orders.paid: %+v, %v", pages, err)
	}
	if _, err := billing.Messages(ctx, admin.MessageQuery{Subject: "parcels", FromSeq: &zero}); !errors.Is(err, qmq.ErrPermissionDenied) || !strings.Contains(err.Error(), "billing") {
		t.Errorf("billing lists parcels: %v, want PERMISSION_DENIED naming billing", err)
	}
	// Asking the broker directly, past the route's check.
	b, _ := json.Marshal(transport.MessagesRequest{Subject: "parcels", FromSeq: &zero})
	if _, err := c.dialAs(t, ctx, leader, "billing").Call(ctx, transport.TypeMessages, b); transport.CodeOf(err) != transport.PermissionDenied ||
		!strings.Contains(err.Error(), "application billing may not consume subject parcels: it may not read its messages") {
		t.Errorf("billing lists parcels at the broker: %v, want PERMISSION_DENIED saying why", err)
	}
	if found, err := billing.FindMessage(ctx, "o1", true); err != nil || len(found) != 1 || string(found[0].Body) != "x" {
		t.Errorf("billing looks up o1: %+v, %v", found, err)
	}
	if found, err := billing.FindMessage(ctx, "p1", true); err != nil || len(found) != 0 {
		t.Errorf("billing looks up parcels' p1: %+v, %v; want nothing found", found, err)
	}
	for _, id := range []string{"o1", "p1"} {
		if found, err := c.admin.FindMessage(ctx, id, false); err != nil || len(found) != 1 {
			t.Errorf("an admin looks up %s: %+v, %v", id, found, err)
		}
	}
}

// TestConsoleAsAnApplication: an application that is not an admin logged
// in to a node's console (HTTP port, TLS, authentication on) reads the
// cluster, its subject's consumer groups and messages; another subject's
// messages are refused, PERMISSION_DENIED naming it, or not found by id;
// an action is refused as an admin's.
func TestConsoleAsAnApplication(t *testing.T) {
	// The console reaches the cluster without a client certificate.
	c := startSecureCluster(t, 100*time.Millisecond, func(c *Config) { c.TLS.ClientAuth = "request" })
	c.create(admin.AppSpec{Code: "billing", Send: []string{"orders.*"}, Consume: []admin.ConsumeGrant{{Subject: "orders.*", ConsumerGroup: "billing"}}})
	c.create(admin.AppSpec{Code: "shipping", Send: []string{"parcels"}})
	c.leaderHolding(t)
	ctx := ctxFor(t, 60*time.Second)
	for app, subject := range map[string]string{"billing": "orders.paid", "shipping": "parcels"} {
		p, err := qmq.NewProducer(c.servers(), c.as(app), qmq.WithSendTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		m := p.GenerateMessage(subject)
		m.SetID(subject + "-1")
		if err := p.SendMessage(ctx, m); err != nil {
			t.Fatalf("%s sends to %s: %v", app, subject, err)
		}
		p.Close()
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: c.clientTLS(t)()}}
	t.Cleanup(hc.CloseIdleConnections)
	call := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "https://"+c.brokers[1].HTTPAddr()+path, strings.NewReader(`{"to":"latest"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("billing", c.secrets["billing"])
		req.Header.Set("X-QMQ-CSRF", "1")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b.String()
	}
	for path, want := range map[string]string{
		"/api/v1/cluster": `"broker_groups"`,
		"/api/v1/subjects/orders.paid/consumer-groups": `"subject":"orders.paid"`,
		"/api/v1/subjects/orders.paid/messages":        `"id":"orders.paid-1"`,
		"/api/v1/messages/orders.paid-1":               `"id":"orders.paid-1"`,
		"/api/v1/messages/parcels-1":                   `"messages":[]`,
	} {
		if st, body := call("GET", path); st != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s as billing: %d %.300s; want 200 with %s", path, st, body, want)
		}
	}
	if st, body := call("GET", "/api/v1/subjects/parcels/messages"); st != http.StatusForbidden ||
		!strings.Contains(body, `"code":"permission_denied"`) || !strings.Contains(body, "application billing may neither send to nor consume subject parcels") {
		t.Errorf("GET parcels' messages as billing: %d %s; want 403 permission_denied saying why", st, body)
	}
	if st, body := call("POST", "/api/v1/subjects/orders.paid/consumer-groups/billing/reset"); st != http.StatusForbidden ||
		!strings.Contains(body, `"code":"permission_denied"`) || !strings.Contains(body, "application billing is not an admin") {
		t.Errorf("a reset as billing: %d %s; want 403 permission_denied saying billing is not an admin", st, body)
	}
}
