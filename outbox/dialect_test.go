package outbox

import "testing"

func TestRebindNumbersPlaceholders(t *testing.T) {
	d := *SQLite
	if got := d.rebind("a = ? AND b IN " + inList(2)); got != "a = ? AND b IN (?, ?)" {
		t.Errorf("sqlite rebind = %q", got)
	}
	d.Placeholder = PostgreSQL.Placeholder
	if got := d.rebind("a = ? AND b IN " + inList(2)); got != "a = $1 AND b IN ($2, $3)" {
		t.Errorf("numbered rebind = %q", got)
	}
	if got := SQLite.InsertIgnore("t", []string{"a", "b"}); got != "INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING" {
		t.Errorf("InsertIgnore = %q", got)
	}
}
