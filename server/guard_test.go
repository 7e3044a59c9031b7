package server

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// guardFixture is a guard over a table of three applications, and the
// handler behind it, which records the access and payload it was given.
type guardFixture struct {
	t       testing.TB
	g       *guard
	table   *auth.Table
	secrets map[string]string
	log     *lockedBuffer
	got     struct {
		reached bool // the handler ran
		acc     *access
		p       []byte
	}
	handler transport.Handler
}

func newGuardFixture(t testing.TB) *guardFixture {
	f := &guardFixture{t: t, secrets: map[string]string{}, log: &lockedBuffer{}}
	var apps []auth.App
	for _, a := range []auth.App{
		{Code: "ops", Admin: true},
		{Code: "billing", Send: []string{"orders.*"}, Consume: []auth.Grant{{Subject: "payments", Group: "billing"}}},
		{Code: "reader"},
		{Code: "blobs", Consume: []auth.Grant{{Subject: "blobs", Group: "g"}}},
	} {
		secret, s, err := auth.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		a.Secrets = []auth.Secret{s}
		apps = append(apps, a)
		f.secrets[a.Code] = secret
	}
	var err error
	if f.table, err = auth.NewTable(apps); err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Output: f.log, Level: hclog.Info})
	f.g = newGuard(true, func() *auth.Table { return f.table }, newAuditLog(log), prometheus.NewRegistry())
	f.handler = f.g.wrap(func(ctx context.Context, _ transport.Type, p []byte) ([]byte, error) {
		f.got.reached, f.got.acc, f.got.p = true, accessOf(ctx), p
		return []byte("served"), nil
	})
	return f
}

// call makes a request on peer's connection.
func (f *guardFixture) call(peer *transport.Peer, t transport.Type, p []byte) error {
	f.got.reached, f.got.acc, f.got.p = false, nil, nil
	_, err := f.handler(transport.WithPeer(context.Background(), peer), t, p)
	return err
}

// app returns a connection that said Hello as code.
func (f *guardFixture) app(code string) *transport.Peer {
	f.t.Helper()
	p := &transport.Peer{Addr: "127.0.0.9:4000"}
	if err := f.call(p, transport.TypeHello, (&transport.HelloRequest{App: code, Secret: f.secrets[code]}).Encode()); err != nil {
		f.t.Fatalf("hello as %s: %v", code, err)
	}
	return p
}

func codeOf(err error) transport.Code { return transport.CodeOf(err) }

func routeRequest(subject, group, app string) []byte {
	b, _ := json.Marshal(transport.RouteRequest{Subject: subject, ConsumerGroup: group, App: app})
	return b
}

// TestGuardClasses: who may make which request type.
func TestGuardClasses(t *testing.T) {
	f := newGuardFixture(t)
	anon := &transport.Peer{Addr: "127.0.0.9:1"}
	ops, billing := f.app("ops"), f.app("billing")
	admin := []transport.Type{transport.TypeJoin, transport.TypeLeave, transport.TypeTransfer, transport.TypeAssign,
		transport.TypeSetWritable, transport.TypeDeregister, transport.TypeForgetConsumerGroup, transport.TypeMetaForgetConsumerGroup,
		transport.TypeSetConsumerGroup, transport.TypeResetConsumerGroup, transport.TypeDeadLetterOp,
		transport.TypeApps, transport.TypeAppPut, transport.TypeAppRotate, transport.TypeAppDelete, transport.TypeSetBrokerConfig, transport.TypeBackup, transport.Type(99)}
	read := []transport.Type{transport.TypeStatus, transport.TypeCluster, transport.TypeSubjects, transport.TypeDelays, transport.TypeConsumerGroups, transport.TypeBrokerConfig}
	nodeOnly := []transport.Type{transport.TypeRegister, transport.TypeBrokerHeartbeat, transport.TypeTime}
	for _, typ := range append(append(append([]transport.Type{transport.TypeSend, transport.TypePull}, admin...), read...), nodeOnly...) {
		if err := f.call(anon, typ, nil); codeOf(err) != transport.Unauthenticated {
			t.Errorf("%s without hello: %v, want UNAUTHENTICATED", typ, err)
		}
	}
	for _, typ := range admin {
		if err := f.call(billing, typ, []byte(`{}`)); codeOf(err) != transport.PermissionDenied || !strings.Contains(err.Error(), "application billing is not an admin") {
			t.Errorf("%s by billing: %v, want PERMISSION_DENIED naming it", typ, err)
		}
		if err := f.call(ops, typ, []byte(`{}`)); err != nil {
			t.Errorf("%s by ops: %v", typ, err)
		}
	}
	// Every admin operation is in the audit log, with who asked and what;
	// one that changes something even after a flood of reads.
	if n := strings.Count(f.log.String(), "admin operation: who=app:ops remote=127.0.0.9:4000"); n != len(admin) {
		t.Errorf("%d admin operations in the audit log, want %d:\n%s", n, len(admin), f.log)
	}
	for range 500 {
		if err := f.call(ops, transport.TypeApps, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.call(ops, transport.TypeAppPut, []byte(`{"code":"backdoor","admin":true}`)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.log.String(), "backdoor") {
		t.Error("an application created after 500 listings is missing from the audit log")
	}
	for _, typ := range read {
		if err := f.call(f.app("reader"), typ, nil); err != nil {
			t.Errorf("%s by reader: %v", typ, err)
		}
	}
	for _, typ := range nodeOnly {
		if err := f.call(ops, typ, nil); codeOf(err) != transport.PermissionDenied {
			t.Errorf("%s by an admin application: %v, want PERMISSION_DENIED", typ, err)
		}
	}
	// The handler's finer checks: billing's rights.
	if err := f.call(billing, transport.TypeSend, nil); err != nil {
		t.Fatal(err)
	}
	acc := f.got.acc
	for _, c := range []struct {
		what string
		err  error
		want transport.Code
	}{
		{"send orders.paid", acc.send("orders.paid"), transport.OK},
		{"send payments", acc.send("payments"), transport.PermissionDenied},
		{"consume payments as billing", acc.consume(transport.TypePull, "payments", "billing"), transport.OK},
		{"consume payments as other", acc.consume(transport.TypePull, "payments", "other"), transport.PermissionDenied},
	} {
		if codeOf(c.err) != c.want {
			t.Errorf("billing: %s: %v, want %s", c.what, c.err, c.want)
		}
	}
	if err := acc.send("payments"); !strings.Contains(err.Error(), "application billing may not send to subject payments") {
		t.Errorf("the refusal does not name what: %v", err)
	}
}

// TestGuardLookup: reading stored messages is open to every application,
// the handler keeping to the subjects each may use (sent to or
// consumed; an admin's and a node's: all), and audited for every caller,
// admin or not, node or application.
func TestGuardLookup(t *testing.T) {
	f := newGuardFixture(t)
	node := &transport.Peer{Addr: "127.0.0.2:1", Certificate: issueCert(t, true)}
	req := []byte(`{"id":"m1"}`)
	if err := f.call(&transport.Peer{Addr: "127.0.0.9:1"}, transport.TypeMessages, req); codeOf(err) != transport.Unauthenticated {
		t.Errorf("messages without hello: %v, want UNAUTHENTICATED", err)
	}
	for _, c := range []struct {
		who      string
		peer     *transport.Peer
		may, not []string // subjects it may read, may not
	}{
		{"app:ops", f.app("ops"), []string{"orders.paid", "payments", "refunds"}, nil},
		{"app:billing", f.app("billing"), []string{"payments"}, []string{"refunds", "orders", "orders.paid"}}, // it sends to orders.*: sending is not reading
		{"app:reader", f.app("reader"), nil, []string{"orders.paid", "payments"}},
		{"node:", node, []string{"orders.paid", "refunds"}, nil},
	} {
		if err := f.call(c.peer, transport.TypeMessages, req); err != nil || !f.got.reached {
			t.Fatalf("messages by %s: %v", c.who, err)
		}
		if n := strings.Count(f.log.String(), "read: who="+c.who); n != 1 {
			t.Errorf("%d audit lines of a read by %s, want 1:\n%s", n, c.who, f.log)
		}
		acc := f.got.acc
		for _, s := range c.may {
			if !acc.mayRead(s) || acc.read(s) != nil {
				t.Errorf("%s may not read %s", c.who, s)
			}
		}
		for _, s := range c.not {
			err := acc.read(s)
			if acc.mayRead(s) || codeOf(err) != transport.PermissionDenied ||
				!strings.Contains(err.Error(), "may not consume subject "+s+": it may not read its messages") {
				t.Errorf("%s reading %s: %v, want PERMISSION_DENIED saying why", c.who, s, err)
			}
		}
	}
	if n := strings.Count(f.log.String(), "admin operation"); n != 0 {
		t.Errorf("reads audited as admin operations:\n%s", f.log)
	}
	var none *access // authentication off, or a call from inside the node
	if !none.mayRead("refunds") || none.read("refunds") != nil {
		t.Error("a nil access may not read")
	}
}

// TestGuardRoute: a route request is checked against the subject (and the
// consumer group, a consumer's), and reaches the handler naming the
// application asking, whatever the client claimed; a node's claim stands.
func TestGuardRoute(t *testing.T) {
	f := newGuardFixture(t)
	billing := f.app("billing")
	for _, c := range []struct {
		subject, group string
		want           transport.Code
	}{
		{"orders.paid", "", transport.OK},
		{"payments", "", transport.OK},
		{"payments", "billing", transport.OK},
		{"payments", "other", transport.PermissionDenied},
		{"orders.paid", "billing", transport.PermissionDenied},
		{"refunds", "", transport.PermissionDenied},
	} {
		err := f.call(billing, transport.TypeRoute, routeRequest(c.subject, c.group, "ops"))
		if codeOf(err) != c.want {
			t.Errorf("route %s/%s: %v, want %s", c.subject, c.group, err, c.want)
			continue
		}
		if err == nil {
			var req transport.RouteRequest
			json.Unmarshal(f.got.p, &req)
			if req.App != "billing" {
				t.Errorf("route %s/%s reached the handler as %q, want billing", c.subject, c.group, req.App)
			}
		}
	}
	// A name past its limit is refused as such, never quoted whole in the
	// refusal or the audit log.
	long := strings.Repeat("x", 1<<20)
	for _, p := range [][]byte{routeRequest(long, "", ""), routeRequest("payments", long, "")} {
		err := f.call(billing, transport.TypeRoute, p)
		if codeOf(err) != transport.Invalid || len(err.Error()) > 1000 || len(f.log.String()) > 10000 {
			t.Fatalf("a route of a name of 1 MiB: %d bytes of error (%.100s), %d bytes of log", len(err.Error()), err, len(f.log.String()))
		}
	}
	node := &transport.Peer{Addr: "127.0.0.2:1", Certificate: issueCert(t, true)}
	if err := f.call(node, transport.TypeRoute, routeRequest("refunds", "", "billing")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(f.got.p), `"app":"billing"`) {
		t.Errorf("a node's route lost the application it asks for: %s", f.got.p)
	}
	// Without authentication, a claim is dropped: only a node may make one.
	open := newGuard(false, nil, newAuditLog(hclog.NewNullLogger()), prometheus.NewRegistry())
	var got []byte
	h := open.wrap(func(_ context.Context, _ transport.Type, p []byte) ([]byte, error) { got = p; return nil, nil })
	if _, err := h(transport.WithPeer(context.Background(), &transport.Peer{}), transport.TypeRoute, routeRequest("s", "", "ops")); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got), "ops") {
		t.Errorf("an open node passed on a client's claim: %s", got)
	}
}

// issueCert returns a certificate of a new CA's, a node's or a client's.
func issueCert(t *testing.T, node bool) *x509.Certificate {
	t.Helper()
	c, err := newCert(node)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newCert(node bool) (*x509.Certificate, error) {
	ca, err := tlsconf.NewCA("", 0)
	if err != nil {
		return nil, err
	}
	b, _, err := ca.Issue(tlsconf.Spec{CN: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Node: node})
	if err != nil {
		return nil, err
	}
	return parseCert(b)
}

// TestGuardNodesAndHello: a node certificate may do everything, a
// client's certificate nothing more than no certificate; a wrong secret,
// an unknown application and a broker without the table yet are refused,
// and the refusals are counted and logged at most once a second.
func TestGuardNodesAndHello(t *testing.T) {
	f := newGuardFixture(t)
	node := &transport.Peer{Addr: "127.0.0.2:1", Certificate: issueCert(t, true)}
	for _, typ := range []transport.Type{transport.TypeRegister, transport.TypeJoin, transport.TypeSend, transport.TypeStatus} {
		if err := f.call(node, typ, nil); err != nil {
			t.Errorf("%s by a node: %v", typ, err)
		}
	}
	client := &transport.Peer{Addr: "127.0.0.3:1", Certificate: issueCert(t, false)}
	if err := f.call(client, transport.TypeStatus, nil); codeOf(err) != transport.Unauthenticated {
		t.Errorf("a client certificate without hello: %v", err)
	}
	before := testutil.ToFloat64(f.g.refused.WithLabelValues("unauthenticated"))
	for i := range 20 {
		hello := transport.HelloRequest{App: "billing", Secret: f.secrets["ops"]}
		if i%2 == 1 {
			hello.App = "nobody"
		}
		if err := f.call(&transport.Peer{Addr: "127.0.0.4:1"}, transport.TypeHello, hello.Encode()); codeOf(err) != transport.Unauthenticated {
			t.Fatalf("a wrong hello: %v", err)
		}
	}
	if got := testutil.ToFloat64(f.g.refused.WithLabelValues("unauthenticated")) - before; got != 20 {
		t.Errorf("%v refusals counted, want 20", got)
	}
	if n := strings.Count(f.log.String(), "request refused"); n > 2 {
		t.Errorf("%d audit lines for 20 refusals within a second: not rate-limited", n)
	}
	if !strings.Contains(f.log.String(), "remote=127.0.0.3:1") {
		t.Errorf("the audit log does not say where from:\n%s", f.log)
	}
	f.table = nil
	if err := f.call(&transport.Peer{}, transport.TypeHello, (&transport.HelloRequest{App: "ops", Secret: f.secrets["ops"]}).Encode()); codeOf(err) != transport.Unavailable {
		t.Errorf("hello before the table arrived: %v, want UNAVAILABLE", err)
	}
}

// TestGuardFollowsTheTable: rights are looked up on every request, so a
// change of the table reaches connections already open: a rotation with
// no grace, a deletion, a permission taken away.
func TestGuardFollowsTheTable(t *testing.T) {
	f := newGuardFixture(t)
	billing := f.app("billing")
	apps := func(change func(a *auth.App)) *auth.Table {
		var out []auth.App
		for _, a := range f.table.Apps() {
			if a.Code == "billing" {
				if change == nil {
					continue
				}
				change(&a)
			}
			out = append(out, a)
		}
		tab, err := auth.NewTable(out)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	original := f.table
	f.table = apps(func(a *auth.App) { a.Send = nil })
	if err := f.call(billing, transport.TypeSend, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.got.acc.send("orders.paid"); codeOf(err) != transport.PermissionDenied {
		t.Errorf("a send right taken away still holds: %v", err)
	}
	_, s, _ := auth.NewSecret()
	f.table = apps(func(a *auth.App) { a.Secrets = []auth.Secret{s} })
	if err := f.call(billing, transport.TypeSend, nil); codeOf(err) != transport.Unauthenticated || !strings.Contains(err.Error(), "rotated") {
		t.Errorf("a rotated-out secret still holds: %v", err)
	}
	f.table = apps(nil)
	if err := f.call(billing, transport.TypeSend, nil); codeOf(err) != transport.Unauthenticated || !strings.Contains(err.Error(), "no longer exists") {
		t.Errorf("a deleted application still holds: %v", err)
	}
	// A rotation with a grace: the old secret's connection works until
	// the grace ends, then is refused.
	_, s2, _ := auth.NewSecret()
	graceEnds := time.Now().Add(time.Minute)
	f.table = original
	f.table = apps(func(a *auth.App) {
		old := a.Secrets[0]
		old.Expires = graceEnds.UnixMilli()
		a.Secrets = []auth.Secret{s2, old}
	})
	if err := f.call(billing, transport.TypeSend, nil); err != nil {
		t.Errorf("the old secret within its grace: %v", err)
	}
	now := f.g.now
	f.g.now = func() time.Time { return graceEnds }
	if err := f.call(billing, transport.TypeSend, nil); codeOf(err) != transport.Unauthenticated {
		t.Errorf("the old secret once its grace ended, on an open connection: %v", err)
	}
	f.g.now = now
	f.table = original
	old := f.g.now
	f.g.now = func() time.Time { return old().Add(time.Hour) }
	if err := f.call(billing, transport.TypeSend, nil); err != nil {
		t.Errorf("the table restored: %v", err)
	}
}

// FuzzGuard sends any request type and payload through a guard with
// authentication on, on a connection that said Hello as an application,
// as a node, or not at all: it never panics, and every refusal is a wire
// error.
func FuzzGuard(f *testing.F) {
	hello := (&transport.HelloRequest{App: "billing", Secret: "x"}).Encode()
	f.Add(uint8(transport.TypeHello), hello, uint8(0))
	f.Add(uint8(transport.TypeRoute), routeRequest("orders.paid", "billing", "ops"), uint8(1))
	f.Add(uint8(transport.TypeRoute), []byte(`{"subject":"`), uint8(1))
	f.Add(uint8(transport.TypeSend), []byte{1, 0}, uint8(2))
	f.Add(uint8(transport.TypeAppPut), []byte(`{}`), uint8(1))
	f.Fuzz(func(t *testing.T, typ uint8, p []byte, who uint8) {
		g := newGuardFixture(t)
		var peer *transport.Peer
		switch who % 3 {
		case 0:
			peer = &transport.Peer{Addr: "127.0.0.9:1"}
		case 1:
			peer = g.app("billing")
		case 2:
			peer = &transport.Peer{Addr: "127.0.0.2:1", Certificate: fuzzNodeCert}
		}
		err := g.call(peer, transport.Type(typ), p)
		var e *transport.Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("a refusal that is no wire error: %v", err)
		}
		if who%3 == 0 && g.got.reached {
			t.Fatalf("a request of type %d from a connection that proved nothing reached its handler", typ)
		}
		if transport.Type(typ) == transport.TypeHello && g.got.reached {
			t.Fatal("a hello reached the node's handler")
		}
		if acc := g.got.acc; acc != nil {
			acc.send(string(p))
			acc.consume(transport.TypePull, string(p), string(p))
		}
	})
}

// fuzzNodeCert is a node certificate for FuzzGuard, made once.
var fuzzNodeCert = func() *x509.Certificate {
	c, err := newCert(true)
	if err != nil {
		panic(err)
	}
	return c
}()

// TestGuardHelloNamesNoBadCode: a Hello whose code is not a name (a
// newline, say, that would forge a line of the audit log) is refused
// without the code written raw into the log.
func TestGuardHelloNamesNoBadCode(t *testing.T) {
	f := newGuardFixture(t)
	hello := (&transport.HelloRequest{App: "x\n2026-12-01 [INFO] audit: admin operation: who=app:ops", Secret: "s"}).Encode()
	if err := f.call(&transport.Peer{Addr: "127.0.0.9:1"}, transport.TypeHello, hello); codeOf(err) != transport.Unauthenticated {
		t.Fatalf("a hello with a bad code: %v", err)
	}
	if log := f.log.String(); strings.Count(log, "\n") != 1 || !strings.Contains(log, "who=app:?") {
		t.Fatalf("the audit log:\n%s", log)
	}
}

// Any application may read stored messages: a flood of its reads fills
// their own share of the audit log's rate, never an admin's.
func TestAuditReadsDoNotCrowdOutAdminReads(t *testing.T) {
	var buf bytes.Buffer
	l := newAuditLog(hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info}))
	for range 5 * auditAdminRate {
		l.read("app:flood", "127.0.0.9:1", transport.TypeMessages, []byte(`{"id":"x"}`))
	}
	l.admin("app:ops", "127.0.0.2:1", transport.TypeApps, nil)
	if n := strings.Count(buf.String(), "read: who=app:flood"); n > 2*auditAdminRate {
		t.Errorf("%d read lines in a burst, want at most %d", n, 2*auditAdminRate)
	}
	if !strings.Contains(buf.String(), "admin operation: who=app:ops") {
		t.Errorf("an admin's read after a flood of message reads was not recorded:\n%.2000s", buf.String())
	}
}

// TestGuardDeadLetters: an application reads the dead letters of a
// consumer group it may consume as, listed or one whole, audited as a
// read; another group's are refused, and resending or purging them stays
// an admin's.
func TestGuardDeadLetters(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	deadLetterRig(t, ctx, clientOf(t, n.ClientAddr()), 2, 10)
	f := newGuardFixture(t)
	f.handler = f.g.wrap(n.handle)
	blobs := f.app("blobs")
	call := func(typ transport.Type, v any) (transport.DeadLetterPage, error) {
		b, _ := json.Marshal(v)
		out, err := f.handler(transport.WithPeer(ctx, blobs), typ, b)
		var page transport.DeadLetterPage
		if err == nil && typ == transport.TypeDeadLetters {
			err = json.Unmarshal(out, &page)
		}
		return page, err
	}
	page, err := call(transport.TypeDeadLetters, transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "g"})
	if err != nil || page.Total != 2 || len(page.Letters) != 2 {
		t.Fatalf("g's dead letters by blobs: %+v, %v", page, err)
	}
	seq := page.Letters[0].Seq
	if one, err := call(transport.TypeDeadLetters, transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "g", Seq: &seq}); err != nil ||
		len(one.Letters) != 1 || len(one.Letters[0].Body) != 10 {
		t.Errorf("one of g's dead letters whole, by blobs: %+v, %v", one, err)
	}
	if n := strings.Count(f.log.String(), "read: who=app:blobs"); n != 2 {
		t.Errorf("%d audit lines of blobs' reads of dead letters, want 2:\n%s", n, f.log)
	}
	if _, err := call(transport.TypeDeadLetters, transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "other"}); codeOf(err) != transport.PermissionDenied ||
		!strings.Contains(err.Error(), "may not consume subject blobs as consumer group other") {
		t.Errorf("another group's dead letters by blobs: %v, want PERMISSION_DENIED", err)
	}
	if _, err := call(transport.TypeDeadLetterOp, transport.DeadLetterOpRequest{Subject: "blobs", ConsumerGroup: "g", Op: transport.DeadLetterResend, All: true}); codeOf(err) != transport.PermissionDenied ||
		!strings.Contains(err.Error(), "application blobs is not an admin") {
		t.Errorf("a resend by blobs: %v, want PERMISSION_DENIED", err)
	}
	// A group without dead letters answers an empty list, not null: the
	// console maps over it.
	b, _ := json.Marshal(transport.DeadLettersRequest{Subject: "blobs", ConsumerGroup: "none"})
	if out, err := f.handler(transport.WithPeer(ctx, f.app("ops")), transport.TypeDeadLetters, b); err != nil || !strings.Contains(string(out), `"letters":[]`) {
		t.Errorf("no dead letters: %s, %v, want an empty list", out, err)
	}
}
