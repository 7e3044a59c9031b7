package auth

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzTable feeds NewTable records decoded from arbitrary JSON, as a
// broker receives them from the metaserver: it refuses or accepts without
// panicking, an accepted table encodes back to one with the same version,
// and a lookup with any code and secret never panics.
func FuzzTable(f *testing.F) {
	a, secret := newApp(f, "billing")
	a.Send = []string{"orders.*"}
	a.Consume = []Grant{{Subject: "*", Group: "g"}}
	seed, _ := json.Marshal([]App{a})
	f.Add(seed, "billing", secret, "orders.x", "g")
	f.Add([]byte(`[{"code":"x","secrets":[{"salt":"00","hash":"00"}]}]`), "x", "", "", "")
	f.Add([]byte(`[{"code":"x","secrets":[]},{"code":"x"}]`), "x", "s", "*", "*")
	f.Add([]byte(`null`), "", "", "", "")
	f.Fuzz(func(t *testing.T, data []byte, code, secret, subject, group string) {
		var apps []App
		if json.Unmarshal(data, &apps) != nil {
			return
		}
		tab, err := NewTable(apps)
		if err != nil {
			return
		}
		b, err := json.Marshal(tab.Apps())
		if err != nil {
			t.Fatal(err)
		}
		var back []App
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, err := NewTable(back)
		if err != nil {
			t.Fatalf("an accepted table encodes to one refused: %v", err)
		}
		if again.Version() != tab.Version() {
			t.Fatal("an accepted table encodes to another version")
		}
		now := time.Now()
		if id, err := tab.Authenticate(code, secret, now); err == nil {
			r, err := tab.Rights(id, now)
			if err != nil {
				t.Fatalf("an identity just proved has no rights: %v", err)
			}
			r.MaySend(subject)
			r.MayConsume(subject, group)
			r.MayUse(subject)
		}
	})
}
