package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/testcluster"
)

// testConfig is a run of orders orders against the broker at server, on
// the database file db, with a short watchdog period.
func testConfig(t *testing.T, server, db string, orders int) config {
	return config{server: server, db: db, orders: orders, timeout: time.Minute, period: 200 * time.Millisecond,
		logger: testcluster.Logger(t)}
}

// logWriter prints a run's lines in the test's log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// The example against an in-process broker: every order placed has one
// order row, one payment and one message on the broker, although one
// message was delivered twice and one was sent only by the watchdog; the
// declined order has none of them. A second run on the same database and
// broker (one order: the lost acknowledgement and the watchdog's send are
// the same order's) pays its own order and nothing of the first run again.
func TestOrderPay(t *testing.T) {
	n := testcluster.Broker(t, nil)
	path := filepath.Join(t.TempDir(), "orderpay.db")
	var runs []*summary
	for _, orders := range []int{5, 1} {
		sum, err := run(context.Background(), testConfig(t, n.ClientAddr(), path, orders), newPrinter(logWriter{t}))
		if err != nil {
			t.Fatal(err)
		}
		if len(sum.placed) != orders {
			t.Fatalf("%d orders placed, want %d", len(sum.placed), orders)
		}
		if sum.redelivered < 1 {
			t.Errorf("no message was delivered again: the lost acknowledgement did not happen")
		}
		runs = append(runs, sum)
	}

	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var placed []string
	for _, sum := range runs {
		placed = append(placed, sum.placed...)
		if got := count(t, db, "SELECT count(*) FROM orders WHERE id = ?", sum.declined); got != 0 {
			t.Errorf("declined order %s: %d order rows, want 0", sum.declined, got)
		}
	}
	for _, id := range placed {
		if got := count(t, db, "SELECT count(*) FROM orders WHERE id = ?", id); got != 1 {
			t.Errorf("order %s: %d order rows, want 1", id, got)
		}
		if got := count(t, db, "SELECT count(*) FROM payments WHERE order_id = ?", id); got != 1 {
			t.Errorf("order %s: %d payments, want 1", id, got)
		}
	}
	if got := count(t, db, "SELECT count(*) FROM payments"); got != len(placed) {
		t.Errorf("%d payments in all, want %d (one per order placed)", got, len(placed))
	}
	if got := count(t, db, "SELECT count(*) FROM qmq_outbox"); got != 0 {
		t.Errorf("%d rows left in qmq_outbox, want 0", got)
	}

	// What the broker holds: one orders.created per order placed, none for
	// a declined order.
	sent := pullOrders(t, n.ClientAddr(), len(placed))
	for _, id := range placed {
		if sent[id] != 1 {
			t.Errorf("order %s: %d messages on the broker, want 1", id, sent[id])
		}
	}
	if len(sent) != len(placed) {
		t.Errorf("messages for %d orders on the broker, want %d: %v", len(sent), len(placed), sent)
	}
}

// pullOrders pulls orders.created from the start as a new group until it
// has want messages, then once more briefly for any beyond, and returns
// how many came for each order.
func pullOrders(t *testing.T, server string, want int) map[string]int {
	t.Helper()
	pl, err := qmq.NewPuller(server, subject, "audit", qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, n := map[string]int{}, 0
	for wait := 200 * time.Millisecond; ; {
		msgs, err := pl.Pull(ctx, 100, wait)
		if err != nil {
			t.Fatalf("pull %s: %v (have %d of %d)", subject, err, n, want)
		}
		for _, m := range msgs {
			got[m.String("order")]++
			n++
		}
		if n >= want {
			if len(msgs) == 0 {
				return got
			}
			wait = 300 * time.Millisecond // a last pull, for any message beyond
		}
	}
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Each setting is refused just out of its range and taken at its edges.
func TestConfigCheck(t *testing.T) {
	ok := testConfig(t, qmq.DefaultServer, "x.db", 1)
	for _, tc := range []struct {
		name   string
		change func(*config)
		ok     bool
	}{
		{"defaults", func(*config) {}, true},
		{"no orders", func(c *config) { c.orders = 0 }, false},
		{"one order", func(c *config) { c.orders = 1 }, true},
		{"most orders", func(c *config) { c.orders = maxOrders }, true},
		{"one order too many", func(c *config) { c.orders = maxOrders + 1 }, false},
		{"no timeout", func(c *config) { c.timeout = 0 }, false},
		{"shortest timeout", func(c *config) { c.timeout = time.Nanosecond }, true},
		{"no period", func(c *config) { c.period = 0 }, false},
		{"no server", func(c *config) { c.server = "" }, false},
		{"no database", func(c *config) { c.db = "" }, false},
		{"no logger", func(c *config) { c.logger = nil }, false},
	} {
		c := ok
		tc.change(&c)
		if err := c.check(); tc.ok != (err == nil) || (err != nil && !errors.Is(err, errUsage)) {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
