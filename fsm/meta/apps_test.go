package meta

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/auth"
)

// newSecret returns a secret and its record.
func newSecret(t testing.TB) (string, auth.Secret) {
	t.Helper()
	secret, s, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return secret, s
}

// createApp is the command creating code with a fresh secret, and the
// secret.
func createApp(t testing.TB, code string, tweak func(*auth.App)) (*PutApp, string) {
	t.Helper()
	secret, s := newSecret(t)
	a := auth.App{Code: code, Secrets: []auth.Secret{s}}
	if tweak != nil {
		tweak(&a)
	}
	return &PutApp{App: a, Create: true}, secret
}

// refused applies cmd, wanting a refusal wrapping ErrInvalid (foretold by
// FSM.Check) that leaves the snapshot byte for byte as it was.
func refused(t *testing.T, f *FSM, cmd Command) error {
	t.Helper()
	before := stateBytes(t, f)
	checked := f.Check(cmd)
	err := apply(t, f, cmd)
	if !errors.Is(err, ErrInvalid) || !errors.Is(checked, ErrInvalid) {
		t.Fatalf("%T %+v: apply %v, check %v; want both refused", cmd, cmd, err, checked)
	}
	if !bytes.Equal(before, stateBytes(t, f)) {
		t.Fatalf("refused %T changed the state", cmd)
	}
	return err
}

func TestAppCommands(t *testing.T) {
	f := New()
	now := time.Now()
	create, secret := createApp(t, "billing", func(a *auth.App) { a.Send = []string{"orders.*"} })
	mustApply(t, f, create)
	tab := f.Apps()
	if tab.Len() != 1 {
		t.Fatalf("table of %d applications, want 1", tab.Len())
	}
	id, err := tab.Authenticate("billing", secret, now)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := tab.Rights(id, now); !r.MaySend("orders.paid") || r.MaySend("invoices") {
		t.Fatal("the created application's rights are not the command's")
	}

	// A second creation of the code is refused, whatever it holds.
	again, _ := createApp(t, "billing", func(a *auth.App) { a.Admin = true })
	if err := refused(t, f, again); !strings.Contains(err.Error(), "application billing exists") {
		t.Fatalf("second creation: %v", err)
	}
	// So is an update of an unknown application, and one carrying secrets.
	refused(t, f, &PutApp{App: auth.App{Code: "nobody", Admin: true}})
	withSecret := &PutApp{App: auth.App{Code: "billing", Secrets: create.App.Secrets}}
	if err := f.Check(withSecret); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an update with secrets checks: %v", err)
	}
	if _, err := Decode(Encode(withSecret)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an update with secrets decodes: %v", err)
	}
	if _, err := Decode(Encode(&PutApp{App: auth.App{Code: "billing"}, Create: true})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a creation without a secret decodes: %v", err)
	}

	// An update replaces the rights, admin flag and limits, and keeps the
	// secrets.
	before := tab.Version()
	mustApply(t, f, &PutApp{App: auth.App{Code: "billing", Consume: []auth.Grant{{Subject: "payments", Group: "billing"}}, MaxSubjects: 5}})
	tab = f.Apps()
	a := tab.App("billing")
	if len(a.Send) != 0 || len(a.Consume) != 1 || a.MaxSubjects != 5 || len(a.Secrets) != 1 || a.Secrets[0] != create.App.Secrets[0] {
		t.Fatalf("after the update: %+v", a)
	}
	if tab.Version() == before {
		t.Fatal("an update left the table's version")
	}
	if _, err := tab.Authenticate("billing", secret, now); err != nil {
		t.Fatalf("the secret after an update: %v", err)
	}

	// A rotation with a grace keeps the old secret until then; the next one
	// drops the oldest; one without a grace keeps only the new.
	secret2, s2 := newSecret(t)
	expires := now.Add(time.Hour).UnixMilli()
	mustApply(t, f, &RotateApp{Code: "billing", Secret: s2, OldExpires: expires})
	a = f.Apps().App("billing")
	old := create.App.Secrets[0]
	old.Expires = expires
	if len(a.Secrets) != 2 || a.Secrets[0] != s2 || a.Secrets[1] != old {
		t.Fatalf("secrets after a rotation with a grace: %+v", a.Secrets)
	}
	for _, s := range []string{secret, secret2} {
		if _, err := f.Apps().Authenticate("billing", s, now); err != nil {
			t.Fatalf("a secret within the grace: %v", err)
		}
	}
	if _, err := f.Apps().Authenticate("billing", secret, now.Add(time.Hour)); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("the old secret after its expiry: %v", err)
	}
	_, s3 := newSecret(t)
	mustApply(t, f, &RotateApp{Code: "billing", Secret: s3, OldExpires: expires + 1})
	prev := s2
	prev.Expires = expires + 1
	if a = f.Apps().App("billing"); len(a.Secrets) != 2 || a.Secrets[0] != s3 || a.Secrets[1] != prev {
		t.Fatalf("secrets after a second rotation: %+v", a.Secrets)
	}
	_, s4 := newSecret(t)
	mustApply(t, f, &RotateApp{Code: "billing", Secret: s4})
	if a = f.Apps().App("billing"); len(a.Secrets) != 1 || a.Secrets[0] != s4 {
		t.Fatalf("secrets after a rotation without a grace: %+v", a.Secrets)
	}
	if a.MaxSubjects != 5 || len(a.Consume) != 1 {
		t.Fatalf("a rotation changed the rights: %+v", a)
	}
	refused(t, f, &RotateApp{Code: "nobody", Secret: s4})
	expiring := s4
	expiring.Expires = 1
	for _, bad := range []*RotateApp{
		{Code: "billing", Secret: expiring},
		{Code: "billing", Secret: s4, OldExpires: -1},
		{Code: "billing", Secret: auth.Secret{Salt: "00", Hash: "00"}},
	} {
		if _, err := Decode(Encode(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v decodes: %v", bad, err)
		}
	}

	// Deletion ends the application and is idempotent.
	mustApply(t, f, &DeleteApp{Code: "billing"})
	if f.Apps().Len() != 0 {
		t.Fatal("a deleted application is in the table")
	}
	mustApply(t, f, &DeleteApp{Code: "billing"})
	mustApply(t, f, &DeleteApp{Code: "never"})
	if _, err := Decode(Encode(&DeleteApp{Code: "-x"})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a deletion of a bad code decodes: %v", err)
	}
}

func TestAppRecordLimits(t *testing.T) {
	rules := func(n int) func(*auth.App) {
		return func(a *auth.App) {
			for i := range n {
				if i%2 == 0 {
					a.Send = append(a.Send, fmt.Sprintf("s%d.*", i))
				} else {
					a.Consume = append(a.Consume, auth.Grant{Subject: "*", Group: fmt.Sprintf("g%d", i)})
				}
			}
		}
	}
	limit := func(n int) func(*auth.App) { return func(a *auth.App) { a.MaxSubjects, a.MaxGroups = n, n } }
	for _, c := range []struct {
		name  string
		tweak func(*auth.App)
		ok    bool
	}{
		{"rules at the limit", rules(auth.MaxRules), true},
		{"rules just under", rules(auth.MaxRules - 1), true},
		{"rules just over", rules(auth.MaxRules + 1), false},
		{"limits at the most", limit(auth.MaxPerApp), true},
		{"limits just under", limit(auth.MaxPerApp - 1), true},
		{"limits just over", limit(auth.MaxPerApp + 1), false},
		{"a bad pattern", func(a *auth.App) { a.Send = []string{"*x"} }, false},
	} {
		create, _ := createApp(t, "a", c.tweak)
		update := &PutApp{App: create.App}
		update.App.Secrets = nil
		for _, cmd := range []*PutApp{create, update} {
			_, err := Decode(Encode(cmd))
			if (err == nil) != c.ok {
				t.Errorf("%s (create %v): decode %v, want ok %v", c.name, cmd.Create, err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v is not ErrInvalid", c.name, err)
			}
		}
	}
	// Two secrets, or one expiring, make no new application.
	create, _ := createApp(t, "a", nil)
	_, s := newSecret(t)
	s.Expires = 9
	two := &PutApp{App: create.App, Create: true}
	two.App.Secrets = append(two.App.Secrets, s)
	if _, err := Decode(Encode(two)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a creation with two secrets decodes: %v", err)
	}
}

// appsOf returns a state's per-application tallies as check computes them.
func appsOf(t *testing.T, f *FSM) (subjects, groups map[string]int) {
	t.Helper()
	doc, err := decodeSnapshot(snapshotBytes(t, f))
	if err != nil {
		t.Fatalf("the state does not restore: %v", err)
	}
	return doc.State.appSubjects, doc.State.appGroups
}

func TestPerAppLimits(t *testing.T) {
	f := New()
	mustApply(t, f, register("g1", "a"))
	mustApply(t, f, register("g2", "a"))
	const n = 3
	c, _ := createApp(t, "billing", func(a *auth.App) { a.MaxSubjects, a.MaxGroups = n, n })
	mustApply(t, f, c)
	c, _ = createApp(t, "ops", nil)
	mustApply(t, f, c)

	// Subjects: n new routes of billing's, one short, then at the limit.
	for i := range n {
		mustApply(t, f, &Assign{Subject: fmt.Sprintf("b%d", i), BrokerGroups: []string{"g1"}, IfNew: true, App: "billing"})
	}
	if u := f.Usage("billing"); u.Subjects != n {
		t.Fatalf("billing's usage %+v after %d routes", u, n)
	}
	over := &Assign{Subject: "b-over", BrokerGroups: []string{"g1"}, IfNew: true, App: "billing"}
	want := fmt.Sprintf("application billing's max subjects is %d", n)
	if err := refused(t, f, over); !errors.Is(err, ErrAppLimit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("billing's route past its limit: %v, want ErrLimit naming %q", err, want)
	}
	// At the limit: its routes still grow, another application's, an
	// unknown one's and nobody's routes are made.
	for _, cmd := range []Command{
		&Assign{Subject: "b0", BrokerGroups: []string{"g2"}, App: "billing"},
		&Assign{Subject: "b1", BrokerGroups: []string{"g2"}, IfNew: true, App: "billing"},
		&Assign{Subject: "o0", BrokerGroups: []string{"g1"}, App: "ops"},
		&Assign{Subject: "u0", BrokerGroups: []string{"g1"}, App: "unknown"},
		&Assign{Subject: "n0", BrokerGroups: []string{"g1"}},
	} {
		mustApply(t, f, cmd)
	}
	if r, _ := f.Route("b0"); r.App != "billing" || len(r.BrokerGroups) != 2 {
		t.Fatalf("route b0 %+v", r)
	}
	if r, _ := f.Route("u0"); r.App != "" {
		t.Fatalf("an unknown application's route is recorded as %q", r.App)
	}
	if r, _ := f.Route("o0"); r.App != "ops" {
		t.Fatalf("ops's route is recorded as %q", r.App)
	}

	// Consumer groups: n of billing's.
	for i := range n {
		mustApply(t, f, &Consumer{Subject: "n0", ConsumerGroup: fmt.Sprintf("c%d", i), App: "billing"})
	}
	mustApply(t, f, &Consumer{Subject: "n0", ConsumerGroup: "c0", App: "billing"}) // known: not one more
	overGroup := &Consumer{Subject: "o0", ConsumerGroup: "c-over", App: "billing"}
	want = fmt.Sprintf("application billing's max groups is %d", n)
	if err := refused(t, f, overGroup); !errors.Is(err, ErrAppLimit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("billing's group past its limit: %v, want ErrLimit naming %q", err, want)
	}
	mustApply(t, f, &Consumer{Subject: "o0", ConsumerGroup: "c-over", App: "ops"})
	mustApply(t, f, &Consumer{Subject: "n0", ConsumerGroup: "a-nobody"})
	if r, _ := f.Route("n0"); strings.Join(r.Consumers, ",") != "a-nobody,c0,c1,c2" || strings.Join(r.ConsumerApps, ",") != ",billing,billing,billing" {
		t.Fatalf("route n0's consumers %v of %v", r.Consumers, r.ConsumerApps)
	}
	// Forgetting one gives the count back.
	mustApply(t, f, &ForgetConsumer{Subject: "n0", ConsumerGroup: "c1"})
	if u := f.Usage("billing"); u.Groups != n-1 {
		t.Fatalf("billing's usage %+v after a forget", u)
	}
	mustApply(t, f, overGroup)
	subjects, groups := appsOf(t, f)
	if !maps.Equal(subjects, f.s.appSubjects) || !maps.Equal(groups, f.s.appGroups) {
		t.Fatalf("tallies %v %v, the state holds %v %v", f.s.appSubjects, f.s.appGroups, subjects, groups)
	}
	// A route whose recorded groups are all forgotten encodes without them.
	mustApply(t, f, &ForgetConsumer{Subject: "o0", ConsumerGroup: "c-over"})
	if r, _ := f.Route("o0"); r.ConsumerApps != nil {
		t.Fatalf("route o0 keeps %v with no group recorded", r.ConsumerApps)
	}

	// A limit lowered below what an application created refuses more, and
	// the state still restores.
	mustApply(t, f, &PutApp{App: auth.App{Code: "ops", MaxSubjects: 1}})
	refused(t, f, &Assign{Subject: "o1", BrokerGroups: []string{"g1"}, App: "ops"})
	if _, err := decodeSnapshot(snapshotBytes(t, f)); err != nil {
		t.Fatal(err)
	}
	// A deleted application's routes and consumer groups stay, recorded as
	// nobody's: a new application of the same code starts with nothing.
	mustApply(t, f, &DeleteApp{Code: "billing", Release: true})
	if u := f.Usage("billing"); u != (AppUsage{}) {
		t.Fatalf("a deleted application's usage %+v", u)
	}
	if r, _ := f.Route("b0"); r.App != "" {
		t.Fatalf("a deleted application's route is recorded as %q", r.App)
	}
	if r, _ := f.Route("n0"); r.ConsumerApps != nil || len(r.Consumers) != 3 {
		t.Fatalf("route n0 keeps %v of %v after its application was deleted", r.ConsumerApps, r.Consumers)
	}
	mustApply(t, f, &Assign{Subject: "b-after", BrokerGroups: []string{"g1"}, App: "billing"})
	if r, _ := f.Route("b-after"); r.App != "" {
		t.Fatal("a deleted application's route is recorded as its")
	}
	c, _ = createApp(t, "billing", func(a *auth.App) { a.MaxSubjects, a.MaxGroups = n, n })
	mustApply(t, f, c)
	for i := range n {
		mustApply(t, f, &Assign{Subject: fmt.Sprintf("b-again%d", i), BrokerGroups: []string{"g1"}, App: "billing"})
		mustApply(t, f, &Consumer{Subject: "n0", ConsumerGroup: fmt.Sprintf("again%d", i), App: "billing"})
	}
	refused(t, f, &Assign{Subject: "b-over-again", BrokerGroups: []string{"g1"}, App: "billing"})
	subjects, groups = appsOf(t, f)
	if !maps.Equal(subjects, f.s.appSubjects) || !maps.Equal(groups, f.s.appGroups) {
		t.Fatalf("tallies %v %v, the state holds %v %v", f.s.appSubjects, f.s.appGroups, subjects, groups)
	}
	// A deletion written before it released what the application made (no
	// Release) is replayed as it was applied then: the records stay its.
	old := New()
	mustApply(t, old, register("g1", "a"))
	c, _ = createApp(t, "ops", nil)
	mustApply(t, old, c)
	mustApply(t, old, &Assign{Subject: "o0", BrokerGroups: []string{"g1"}, App: "ops"})
	mustApply(t, old, &DeleteApp{Code: "ops"})
	if r, _ := old.Route("o0"); r.App != "ops" || old.Usage("ops").Subjects != 1 {
		t.Fatalf("an earlier deletion replayed: route %+v, usage %+v", r, old.Usage("ops"))
	}

	// Round trip: the attributions and the tallies come back.
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) || g.Usage("billing") != f.Usage("billing") || g.Usage("ops") != f.Usage("ops") {
		t.Fatal("the restored state differs")
	}
	if g.Apps().Version() != f.Apps().Version() {
		t.Fatal("the restored table differs")
	}
}

// TestSnapshotWithoutApps: a snapshot written before applications existed
// restores, with an empty table, and takes application commands.
func TestSnapshotWithoutApps(t *testing.T) {
	old := `{"applied":7,"state":{"groups":{"g1":{"nodes":{"a":{"raft_addr":"127.0.0.1:1","client_addr":"127.0.0.1:2"}}}},` +
		`"subjects":{"s":{"groups":["g1"],"consumers":["c"]}},"members":{}}}`
	f := New()
	if err := f.Restore(io.NopCloser(strings.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	if f.Apps() == nil || f.Apps().Len() != 0 {
		t.Fatal("a snapshot without applications has a table")
	}
	if got := string(snapshotBytes(t, f)); got != old {
		t.Fatalf("the old snapshot encodes anew as\n%s", got)
	}
	c, secret := createApp(t, "billing", nil)
	mustApply(t, f, c)
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "b", App: "billing"})
	if _, err := f.Apps().Authenticate("billing", secret, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.Route("s"); strings.Join(r.ConsumerApps, ",") != "billing," {
		t.Fatalf("consumer applications %v of %v", r.ConsumerApps, r.Consumers)
	}
	// A snapshot whose records do not check is refused whole.
	for _, bad := range []string{
		`{"state":{"groups":{},"subjects":{},"members":{},"apps":{"x":{"code":"y","secrets":[]}}}}`,
		`{"state":{"groups":{},"subjects":{},"members":{},"apps":{"x":{"code":"x","secrets":[]}}}}`,
		`{"state":{"groups":{},"subjects":{},"members":{},"apps":{"x":null}}}`,
		`{"state":{"groups":{"g":{"nodes":{}}},"subjects":{"s":{"groups":["g"],"app":"-x"}},"members":{}}}`,
		`{"state":{"groups":{"g":{"nodes":{}}},"subjects":{"s":{"groups":["g"],"consumers":["a"],"consumer_apps":["x","y"]}},"members":{}}}`,
	} {
		if err := New().Restore(io.NopCloser(strings.NewReader(bad))); !errors.Is(err, ErrInvalid) {
			t.Errorf("restore of %s: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestEmptyConsumerAppsRestore: a snapshot whose route lists no consumer
// group's application ("consumer_apps":[]) restores as one that leaves
// them out, and takes consumer groups of applications and forgets them.
func TestEmptyConsumerAppsRestore(t *testing.T) {
	f := New()
	snap := `{"state":{"groups":{"g":{"nodes":{}}},"subjects":{"s":{"groups":["g"],"consumers":["b","d"],"consumer_apps":[]}},"members":{},` +
		`"apps":{"x":{"code":"x","secrets":[{"salt":"` + rightsOnly.Salt + `","hash":"` + rightsOnly.Hash + `"}]}}}}`
	if err := f.Restore(io.NopCloser(strings.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []Command{&Consumer{Subject: "s", ConsumerGroup: "c", App: "x"}, &ForgetConsumer{Subject: "s", ConsumerGroup: "b"}, &Consumer{Subject: "s", ConsumerGroup: "a"}} {
		mustApply(t, f, cmd)
	}
	if r, _ := f.Route("s"); strings.Join(r.Consumers, ",") != "a,c,d" || strings.Join(r.ConsumerApps, ",") != ",x," {
		t.Fatalf("consumers %v of %v", r.Consumers, r.ConsumerApps)
	}
}

// TestProvisionalConsumerGroups: a consumer group a broker group recorded
// for a pull goes, and gives its application's count back, once every
// broker group holding it forgot it by itself; a declared one stays.
func TestProvisionalConsumerGroups(t *testing.T) {
	f := New()
	mustApply(t, f, register("g1", "a"))
	mustApply(t, f, register("g2", "a"))
	c, _ := createApp(t, "billing", func(a *auth.App) { a.MaxGroups = 2 })
	mustApply(t, f, c)
	mustApply(t, f, &Assign{Subject: "s", BrokerGroups: []string{"g1", "g2"}, App: "billing"})
	usage := func() int { return f.Usage("billing").Groups }
	consumers := func() string { r, _ := f.Route("s"); return strings.Join(r.Consumers, ",") }

	// Recorded by g1, then by g2 too: held by both.
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "bc", App: "billing", Broker: "g1"})
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "bc", App: "billing", Broker: "g2"})
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "bc", Broker: "g1"})
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "bc", Broker: "g1"}) // a retry
	if consumers() != "bc" || usage() != 1 {
		t.Fatalf("after g1 forgot it: consumers %q, usage %d", consumers(), usage())
	}
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "bc", Broker: "g2"})
	if consumers() != "" || usage() != 0 {
		t.Fatalf("after both forgot it: consumers %q, usage %d", consumers(), usage())
	}
	if r, _ := f.Route("s"); r.ConsumerHolders != nil || r.ConsumerApps != nil {
		t.Fatalf("a route with no groups left keeps %v %v", r.ConsumerHolders, r.ConsumerApps)
	}

	// The limit is the application's again: two groups come and go.
	for range 3 {
		for _, g := range []string{"x", "y"} {
			mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: g, App: "billing", Broker: "g1"})
		}
		refused(t, f, &Consumer{Subject: "s", ConsumerGroup: "z", App: "billing", Broker: "g1"})
		for _, g := range []string{"x", "y"} {
			mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: g, Broker: "g1"})
		}
	}

	// Declared (a consumer asked for its route), before or after a broker
	// group recorded it: a broker group forgetting it leaves it.
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "declared", App: "billing"})
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "declared", App: "billing", Broker: "g1"})
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "later", App: "billing", Broker: "g1"})
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "later", App: "billing"})
	for _, g := range []string{"declared", "later"} {
		mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: g, Broker: "g1"})
	}
	if consumers() != "declared,later" || usage() != 2 {
		t.Fatalf("declared groups: consumers %q, usage %d", consumers(), usage())
	}
	if r, _ := f.Route("s"); r.ConsumerHolders != nil {
		t.Fatalf("only declared groups, holders %v", r.ConsumerHolders)
	}
	// A broker group not in the route records a declared group.
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "later"})
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "elsewhere", App: "billing", Broker: "g9"})
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "elsewhere", Broker: "g9"})
	if consumers() != "declared,elsewhere" {
		t.Fatalf("consumers %q", consumers())
	}
	// An operator forgets a provisional one whole.
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "p", Broker: "g2"})
	mustApply(t, f, &ForgetConsumer{Subject: "s", ConsumerGroup: "p"})
	if consumers() != "declared,elsewhere" {
		t.Fatalf("consumers %q", consumers())
	}

	// Round trip, and a snapshot holding a group held by a group past the
	// route's is refused.
	mustApply(t, f, &Consumer{Subject: "s", ConsumerGroup: "held", Broker: "g2"})
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
		t.Fatal("the restored state differs")
	}
	bad := bytes.Replace(snapshotBytes(t, f), []byte(`"consumer_holders":[0,0,2]`), []byte(`"consumer_holders":[0,0,4]`), 1)
	if bytes.Equal(bad, snapshotBytes(t, f)) {
		t.Fatalf("no holders in %s", snapshotBytes(t, f))
	}
	if err := New().Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a snapshot naming a holder past the route: %v", err)
	}
}
