package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
)

func TestPatterns(t *testing.T) {
	long := strings.Repeat("a", limits.MaxName)
	for _, c := range []struct {
		pattern string
		ok      bool
	}{
		{"*", true}, {"orders", true}, {"orders.*", true}, {"o*", true},
		{long, true}, {long + "*", true}, {long + "a", false}, {long + "a*", false},
		{"", false}, {"**", false}, {"*orders", false}, {"or*ders", false}, {".orders*", false}, {"a b", false},
	} {
		err := CheckPattern("subject", c.pattern)
		if (err == nil) != c.ok {
			t.Errorf("CheckPattern(%q) = %v, want ok %v", c.pattern, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckPattern(%q) = %v, not ErrInvalid", c.pattern, err)
		}
	}
	for _, c := range []struct {
		pattern, name string
		match         bool
	}{
		{"*", "anything", true},
		{"orders", "orders", true}, {"orders", "orders.paid", false}, {"orders", "order", false},
		{"orders.*", "orders.paid", true}, {"orders.*", "orders.", true}, {"orders.*", "orders", false}, {"orders.*", "ordersx", false},
		{"orders*", "orders", true}, {"orders*", "ordersx", true},
	} {
		var m matcher
		m.add(c.pattern)
		if got := m.match(c.name); got != c.match {
			t.Errorf("%q matches %q = %v, want %v", c.pattern, c.name, got, c.match)
		}
	}
}

// newApp returns a valid record with a fresh secret, and the secret.
func newApp(t testing.TB, code string) (App, string) {
	t.Helper()
	secret, s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return App{Code: code, Secrets: []Secret{s}}, secret
}

func TestAppCheckLimits(t *testing.T) {
	a, _ := newApp(t, "billing")
	if err := a.Check(); err != nil {
		t.Fatal(err)
	}
	rules := func(n int) App {
		b := a
		b.Send = nil
		b.Consume = nil
		for i := range n {
			if i%2 == 0 {
				b.Send = append(b.Send, "s*")
			} else {
				b.Consume = append(b.Consume, Grant{Subject: "s*", Group: "*"})
			}
		}
		return b
	}
	for _, c := range []struct {
		name string
		app  App
		ok   bool
	}{
		{"rules at the limit", rules(MaxRules), true},
		{"rules just under", rules(MaxRules - 1), true},
		{"rules just over", rules(MaxRules + 1), false},
		{"no secret", App{Code: "x"}, false},
		{"three secrets", App{Code: "x", Secrets: []Secret{a.Secrets[0], a.Secrets[0], a.Secrets[0]}}, false},
		{"current secret expires", App{Code: "x", Secrets: []Secret{{Salt: a.Secrets[0].Salt, Hash: a.Secrets[0].Hash, Expires: 1}}}, false},
		{"old secret expires", App{Code: "x", Secrets: []Secret{a.Secrets[0], {Salt: a.Secrets[0].Salt, Hash: a.Secrets[0].Hash, Expires: 1}}}, true},
		{"short hash", App{Code: "x", Secrets: []Secret{{Salt: a.Secrets[0].Salt, Hash: "ab"}}}, false},
		{"bad code", App{Code: "-x", Secrets: a.Secrets}, false},
		{"bad group pattern", App{Code: "x", Secrets: a.Secrets, Consume: []Grant{{Subject: "s", Group: ""}}}, false},
		{"max subjects at the limit", App{Code: "x", Secrets: a.Secrets, MaxSubjects: MaxPerApp}, true},
		{"max subjects over", App{Code: "x", Secrets: a.Secrets, MaxSubjects: MaxPerApp + 1}, false},
		{"max groups negative", App{Code: "x", Secrets: a.Secrets, MaxGroups: -1}, false},
		{"max consumers at the limit", App{Code: "x", Secrets: a.Secrets, MaxConsumers: limits.MaxConsumers}, true},
		{"max consumers just under", App{Code: "x", Secrets: a.Secrets, MaxConsumers: limits.MaxConsumers - 1}, true},
		{"max consumers just over", App{Code: "x", Secrets: a.Secrets, MaxConsumers: limits.MaxConsumers + 1}, false},
		{"max consumers negative", App{Code: "x", Secrets: a.Secrets, MaxConsumers: -1}, false},
		{"max delayed at the limit", App{Code: "x", Secrets: a.Secrets, MaxDelayed: limits.MaxDelayed}, true},
		{"max delayed just under", App{Code: "x", Secrets: a.Secrets, MaxDelayed: limits.MaxDelayed - 1}, true},
		{"max delayed just over", App{Code: "x", Secrets: a.Secrets, MaxDelayed: limits.MaxDelayed + 1}, false},
		{"max delayed negative", App{Code: "x", Secrets: a.Secrets, MaxDelayed: -1}, false},
	} {
		err := c.app.Check()
		if (err == nil) != c.ok {
			t.Errorf("%s: Check = %v, want ok %v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", c.name, err)
		}
	}
}

func TestSecrets(t *testing.T) {
	secret, s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if len(secret) != SecretLen || !strings.HasPrefix(secret, secretPrefix) {
		t.Fatalf("secret %q: length %d, want %d with prefix %s", secret, len(secret), SecretLen, secretPrefix)
	}
	if strings.Contains(s.Hash, secret) || strings.Contains(s.Salt, secret[len(secretPrefix):]) {
		t.Fatal("the record holds the secret")
	}
	now := time.Now()
	if !s.Matches(secret, now) {
		t.Fatal("a secret does not match its record")
	}
	if s.Matches(secret[:len(secret)-1]+"x", now) || s.Matches("", now) {
		t.Fatal("a wrong secret matches")
	}
	other, s2, _ := NewSecret()
	if other == secret || s2.Salt == s.Salt {
		t.Fatal("two secrets alike")
	}
	s.Expires = now.UnixMilli() + 1
	if !s.Matches(secret, now) || s.Matches(secret, now.Add(time.Millisecond)) {
		t.Fatal("expiry is not exactly at Expires")
	}
}

func TestTable(t *testing.T) {
	billing, billingSecret := newApp(t, "billing")
	billing.Send = []string{"orders.*", "invoices"}
	billing.Consume = []Grant{{Subject: "payments.*", Group: "billing"}, {Subject: "refunds", Group: "billing-*"}}
	ops, opsSecret := newApp(t, "ops")
	ops.Admin = true
	tab, err := NewTable([]App{ops, billing})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := tab.Authenticate("billing", opsSecret, now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("another application's secret: %v", err)
	}
	if _, err := tab.Authenticate("nobody", billingSecret, now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("an unknown application: %v", err)
	}
	if _, err := tab.Authenticate("billing", strings.Repeat("x", MaxSecretLen+1), now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a secret over the limit: %v", err)
	}
	id, err := tab.Authenticate("billing", billingSecret, now)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tab.Rights(id, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		got  bool
		want bool
	}{
		{"send orders.paid", r.MaySend("orders.paid"), true},
		{"send invoices", r.MaySend("invoices"), true},
		{"send invoices.x", r.MaySend("invoices.x"), false},
		{"send payments.in", r.MaySend("payments.in"), false},
		{"consume payments.in as billing", r.MayConsume("payments.in", "billing"), true},
		{"consume payments.in as other", r.MayConsume("payments.in", "other"), false},
		{"consume refunds as billing-eu", r.MayConsume("refunds", "billing-eu"), true},
		{"consume refunds as billing", r.MayConsume("refunds", "billing"), false},
		{"consume orders.paid", r.MayConsume("orders.paid", "billing"), false},
		{"use payments.in", r.MayUse("payments.in"), true},
		{"use orders.x", r.MayUse("orders.x"), true},
		{"use secrets", r.MayUse("secrets"), false},
		{"read payments.in", r.MayRead("payments.in"), true},
		{"read refunds", r.MayRead("refunds"), true},
		{"read orders.paid (it only sends there)", r.MayRead("orders.paid"), false},
		{"read secrets", r.MayRead("secrets"), false},
		{"admin", r.Admin(), false},
	} {
		if c.got != c.want {
			t.Errorf("billing: %s = %v, want %v", c.what, c.got, c.want)
		}
	}
	opsID, _ := tab.Authenticate("ops", opsSecret, now)
	or, _ := tab.Rights(opsID, now)
	if !or.Admin() || !or.MaySend("anything") || !or.MayConsume("a", "b") || !or.MayRead("a") {
		t.Fatal("an admin application may not do everything")
	}

	// A rotation keeps the old secret until it expires; a deletion ends it.
	secret2, s2, _ := NewSecret()
	old := billing.Secrets[0]
	old.Expires = now.Add(time.Minute).UnixMilli()
	rotated := billing
	rotated.Secrets = []Secret{s2, old}
	tab2, err := NewTable([]App{ops, rotated})
	if err != nil {
		t.Fatal(err)
	}
	if tab2.Version() == tab.Version() {
		t.Fatal("a rotation does not change the version")
	}
	if _, err := tab2.Rights(id, now); err != nil {
		t.Fatalf("the old secret's identity before it expires: %v", err)
	}
	if _, err := tab2.Rights(id, now.Add(time.Minute)); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("the old secret's identity after it expires: %v", err)
	}
	if _, err := tab2.Authenticate("billing", secret2, now); err != nil {
		t.Fatal(err)
	}
	tab3, _ := NewTable([]App{ops})
	if _, err := tab3.Rights(id, now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("a deleted application: %v", err)
	}
	// Equal content, equal version, whatever the order given.
	again, _ := NewTable([]App{billing, ops})
	if again.Version() != tab.Version() {
		t.Fatal("equal tables have different versions")
	}
	if _, err := NewTable([]App{ops, ops}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("an application twice: %v", err)
	}
	var none *Table
	if none.Len() != 0 || none.Version() != "" || none.App("x") != nil {
		t.Fatal("the nil table is not empty")
	}
	if _, err := none.Authenticate("x", "y", now); !errors.Is(err, ErrUnauthenticated) {
		t.Fatal(err)
	}
}

func TestTableLimit(t *testing.T) {
	a, _ := newApp(t, "a")
	apps := make([]App, MaxApps+1)
	for i := range apps {
		apps[i] = a
		apps[i].Code = "app" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + string(rune('0'+i/26%10)) + string(rune('0'+i/260))
	}
	if _, err := NewTable(apps[:MaxApps]); err != nil {
		t.Fatalf("MaxApps applications: %v", err)
	}
	if _, err := NewTable(apps); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MaxApps+1 applications: %v", err)
	}
}
