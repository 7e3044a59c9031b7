package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// raftLogHolds reports whether any entry of m's Raft log holds s.
func raftLogHolds(t *testing.T, m *MetaNode, s string) bool {
	t.Helper()
	first, err := m.store.Logs().FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := m.store.Logs().LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := m.store.Logs().GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(l.Data, []byte(s)) {
			return true
		}
	}
	return false
}

// snapshotHolds reports whether a snapshot of m's state holds s.
func snapshotHolds(t *testing.T, m *MetaNode, s string) bool {
	t.Helper()
	snap, err := m.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bufferSink
	if err := snap.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(buf.Bytes(), []byte(s))
}

type bufferSink struct{ bytes.Buffer }

func (*bufferSink) ID() string    { return "test" }
func (*bufferSink) Cancel() error { return nil }
func (*bufferSink) Close() error  { return nil }

// announced waits until m, leading, has recorded its client address: the
// last entry it writes on its own, so that tests may count entries.
func announced(t *testing.T, m *MetaNode) {
	t.Helper()
	waitFor(t, 10*time.Second, "the metaserver to record its address", func() bool { return m.fsm.MemberAddr(m.cfg.ID) == m.ClientAddr() })
}

// wantInvalid fails the test unless err is INVALID saying want.
func wantInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	if transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want INVALID saying %q", what, err, want)
	}
}

// TestMetaApps creates, lists, updates, rotates and deletes an
// application through a broker that forwards to the metaserver: the
// secret is answered once, verifies against the stored record, and is
// never in the Raft log or a snapshot; refusals cost no Raft entry.
func TestMetaApps(t *testing.T) {
	m := startMeta(t, "m1", true)
	b := startMetaBroker(t, "g1", m)
	waitFor(t, 10*time.Second, "the broker to register", func() bool { _, ok := m.fsm.BrokerGroup("g1"); return ok })
	announced(t, m)
	a := newAdmin(t, b.ClientAddr())
	ctx := ctxFor(t, 30*time.Second)

	spec := admin.AppSpec{Code: "billing", Send: []string{"orders.*"}, Consume: []admin.ConsumeGrant{{Subject: "payments", ConsumerGroup: "billing"}}, MaxConsumerGroups: 7}
	secret, err := a.CreateApp(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	stored := m.fsm.Apps().App("billing")
	if stored == nil || len(stored.Secrets) != 1 || !stored.Secrets[0].Matches(secret, time.Now()) {
		t.Fatalf("the secret answered does not verify against the stored record %+v", stored)
	}
	first := stored.Secrets[0]

	infos, err := a.Apps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := admin.AppInfo{Code: "billing", Send: spec.Send, Consume: spec.Consume, MaxSubjects: auth.DefaultMaxSubjects, MaxConsumerGroups: 7,
		MaxConsumers: auth.DefaultMaxConsumers, MaxDelayed: auth.DefaultMaxDelayed, Secrets: 1}
	if len(infos) != 1 || fmt.Sprint(infos[0]) != fmt.Sprint(want) {
		t.Fatalf("apps: %+v, want %+v", infos, want)
	}
	raw, err := clientOf(t, m.ClientAddr()).Call(ctx, transport.TypeApps, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{first.Salt, first.Hash, secret, "salt", "hash"} {
		if strings.Contains(string(raw), s) {
			t.Fatalf("the list holds %q: %s", s, raw)
		}
	}

	// A second creation is refused, and costs no Raft entry.
	last := m.raft.LastIndex()
	_, err = a.CreateApp(ctx, admin.AppSpec{Code: "billing", Admin: true})
	wantInvalid(t, "a second creation", err, "application billing exists")
	if m.raft.LastIndex() != last {
		t.Fatal("a refused creation took a Raft entry")
	}
	err = a.UpdateApp(ctx, admin.AppSpec{Code: "nobody"})
	wantInvalid(t, "an update of an unknown application", err, "no application nobody")
	_, err = a.CreateApp(ctx, admin.AppSpec{Code: "bad", Send: []string{"*x"}})
	wantInvalid(t, "a bad pattern", err, "pattern")

	// An update replaces the rights and keeps the secret.
	if err := a.UpdateApp(ctx, admin.AppSpec{Code: "billing", Admin: true}); err != nil {
		t.Fatal(err)
	}
	if s := m.fsm.Apps().App("billing"); !s.Admin || len(s.Send) != 0 || len(s.Secrets) != 1 || s.Secrets[0] != first {
		t.Fatalf("after the update: %+v", s)
	}

	// A rotation: the new secret first, the old one kept until the grace
	// ends.
	before := time.Now()
	secret2, err := a.RotateApp(ctx, "billing", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	s := m.fsm.Apps().App("billing")
	if len(s.Secrets) != 2 || !s.Secrets[0].Matches(secret2, after) || s.Secrets[1].Salt != first.Salt || !s.Secrets[1].Matches(secret, after) {
		t.Fatalf("secrets after a rotation: %+v", s.Secrets)
	}
	if exp := s.Secrets[1].Expires; exp < before.Add(time.Hour).UnixMilli() || exp > after.Add(time.Hour).UnixMilli() {
		t.Fatalf("the old secret expires at %d, want an hour after the rotation (%s)", exp, before)
	}
	infos, err = a.Apps(ctx)
	if err != nil || len(infos) != 1 || infos[0].Secrets != 2 || infos[0].OldSecretExpires.UnixMilli() != s.Secrets[1].Expires {
		t.Fatalf("apps after a rotation: %+v %v", infos, err)
	}

	// The grace's bounds: at the most and just under are taken, just over
	// is refused, by the SDK and by the metaserver.
	for _, ms := range []int64{transport.MaxAppGrace.Milliseconds(), transport.MaxAppGrace.Milliseconds() - 1, 0} {
		body, _ := json.Marshal(transport.AppRotateRequest{Code: "billing", GraceMillis: ms})
		if _, err := clientOf(t, m.ClientAddr()).Call(ctx, transport.TypeAppRotate, body); err != nil {
			t.Fatalf("a rotation with a grace of %d ms: %v", ms, err)
		}
	}
	if s := m.fsm.Apps().App("billing"); len(s.Secrets) != 1 {
		t.Fatalf("a rotation without a grace kept %d secrets", len(s.Secrets))
	}
	last = m.raft.LastIndex()
	for _, ms := range []int64{transport.MaxAppGrace.Milliseconds() + 1, -1} {
		body, _ := json.Marshal(transport.AppRotateRequest{Code: "billing", GraceMillis: ms})
		_, err := clientOf(t, m.ClientAddr()).Call(ctx, transport.TypeAppRotate, body)
		wantInvalid(t, fmt.Sprintf("a grace of %d ms", ms), err, "grace")
	}
	if _, err := a.RotateApp(ctx, "billing", transport.MaxAppGrace+time.Millisecond); err == nil {
		t.Fatal("the SDK rotates with a grace over the most")
	}
	_, err = a.RotateApp(ctx, "nobody", 0)
	wantInvalid(t, "a rotation of an unknown application", err, "no application nobody")
	if m.raft.LastIndex() != last {
		t.Fatal("a refused rotation took a Raft entry")
	}

	// No secret is in the Raft log or a snapshot, though their hashes are.
	if !raftLogHolds(t, m, first.Hash) {
		t.Fatal("the scan of the Raft log does not find a secret's hash: it scans nothing")
	}
	for _, s := range []string{secret, secret2} {
		if raftLogHolds(t, m, s) || snapshotHolds(t, m, s) {
			t.Fatalf("a secret is in the Raft log or a snapshot")
		}
	}

	// Deletion, and again: both succeed, the second without an entry.
	if err := a.DeleteApp(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	last = m.raft.LastIndex()
	if err := a.DeleteApp(ctx, "billing"); err != nil {
		t.Fatal(err)
	}
	if m.raft.LastIndex() != last {
		t.Fatal("deleting an unknown application took a Raft entry")
	}
	err = a.DeleteApp(ctx, "-bad")
	wantInvalid(t, "deleting a bad code", err, "application")
	if infos, err := a.Apps(ctx); err != nil || len(infos) != 0 {
		t.Fatalf("apps after the deletion: %+v %v", infos, err)
	}
}

// routeFor asks for a subject's route on behalf of app, as a broker
// forwards a client's request.
func routeFor(t *testing.T, m *MetaNode, app, subject, group string) error {
	t.Helper()
	// As a broker forwards it for an application: the claim stands (from
	// a client that is not a node, the guard replaces it).
	b, _ := json.Marshal(transport.RouteRequest{Subject: subject, ConsumerGroup: group, App: app})
	_, err := m.srv.Handle(ctxFor(t, 10*time.Second), transport.TypeRoute, b)
	return err
}

// startAppsMeta starts a metaserver and a broker group g1 registered
// with it, and returns the metaserver and an admin.Client of it once g1 is
// available and the metaserver leads with its address recorded.
func startAppsMeta(t *testing.T) (*MetaNode, *admin.Client) {
	t.Helper()
	m := startMeta(t, "m1", true)
	startMetaBroker(t, "g1", m)
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "g1 to be available", func() bool { ok, _ := groupAvailable(t, a, "g1"); return ok })
	announced(t, m)
	return m, a
}

// TestMetaAppLimits: an application's new routes and consumer groups past
// its limits are refused, INVALID naming the limit, and another
// application's are not.
func TestMetaAppLimits(t *testing.T) {
	m, a := startAppsMeta(t)
	ctx := ctxFor(t, 30*time.Second)
	const n = 2
	for _, spec := range []admin.AppSpec{{Code: "small", MaxSubjects: n, MaxConsumerGroups: n}, {Code: "other"}} {
		if _, err := a.CreateApp(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := routeFor(t, m, "small", fmt.Sprintf("s%d", i), ""); err != nil {
			t.Fatalf("route %d of %d: %v", i+1, n, err)
		}
	}
	last := m.raft.LastIndex()
	wantInvalid(t, "a route past the limit", routeFor(t, m, "small", "s-over", ""), fmt.Sprintf("application small's max subjects is %d", n))
	if _, ok := m.fsm.Route("s-over"); ok || m.raft.LastIndex() != last {
		t.Fatal("a route refused at the application's limit was made, or took a Raft entry")
	}
	for _, c := range []struct{ app, subject string }{{"small", "s0"}, {"other", "s-over"}, {"", "o1"}, {"unknown", "o2"}} {
		if err := routeFor(t, m, c.app, c.subject, ""); err != nil {
			t.Fatalf("a route of %s for %q at small's limit: %v", c.subject, c.app, err)
		}
	}
	// Consumer groups.
	for i := range n {
		if err := routeFor(t, m, "small", "s0", fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	wantInvalid(t, "a group past the limit", routeFor(t, m, "small", "s1", "c-over"), fmt.Sprintf("application small's max groups is %d", n))
	for limit, want := range map[string]float64{"subjects": 1, "consumer_groups": 1} {
		if got := labeledCounter(t, m.registry, "qmq_meta_app_limit_refusals_total", "limit", limit); got != want {
			t.Errorf("qmq_meta_app_limit_refusals_total{limit=%q} = %v, want %v", limit, got, want)
		}
	}
	if err := routeFor(t, m, "small", "s0", "c0"); err != nil {
		t.Fatalf("a group of small's already recorded: %v", err)
	}
	if err := routeFor(t, m, "other", "s1", "c-over"); err != nil {
		t.Fatal(err)
	}
	infos, err := a.Apps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.Code == "small" && (i.Subjects != n || i.ConsumerGroups != n) || i.Code == "other" && (i.Subjects != 1 || i.ConsumerGroups != 1) {
			t.Errorf("%s created %d subjects and %d groups", i.Code, i.Subjects, i.ConsumerGroups)
		}
	}
	wantInvalid(t, "a route for a bad application code", routeFor(t, m, "-x", "s0", ""), "application")
}

// TestMetaAppGroupLimitUnderRacingRequests: racing requests for new
// consumer groups of one application record no more than its limit, and
// every one past it is refused.
func TestMetaAppGroupLimitUnderRacingRequests(t *testing.T) {
	m, a := startAppsMeta(t)
	const limit, racers = 2, 20
	if _, err := a.CreateApp(ctxFor(t, 30*time.Second), admin.AppSpec{Code: "small", MaxConsumerGroups: limit}); err != nil {
		t.Fatal(err)
	}
	if err := routeFor(t, m, "small", "s0", ""); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, racers)
	for i := range racers {
		go func() { errs <- routeFor(t, m, "small", "s0", fmt.Sprintf("c%d", i)) }()
	}
	served := 0
	for range racers {
		err := <-errs
		switch {
		case err == nil:
			served++
		case transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), "max groups"):
			t.Errorf("a racing request: %v", err)
		}
	}
	if r, _ := m.fsm.Route("s0"); served != limit || len(r.Consumers) != limit {
		t.Fatalf("%d racing requests served and %d groups recorded, want %d of each", served, len(r.Consumers), limit)
	}
}
