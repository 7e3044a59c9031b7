package test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// outbox_check.go reads back what the outbox's end-to-end test left, in
// the producer's database, the consumer's database and the message log,
// and compares it.

// idCounts counts occurrences by order id.
type idCounts map[string]int

// queryIDs runs query, which selects an order id and a count, and returns
// the counts by id.
func queryIDs(t *testing.T, db *sql.DB, query string) idCounts {
	t.Helper()
	rows, err := db.Query(query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	out := idCounts{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out[id] += n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}

// countRows returns the single number query selects.
func countRows(db *sql.DB, query string) (int, error) {
	var n int
	err := db.QueryRow(query).Scan(&n)
	return n, err
}

// logRead is what a fresh consumer group read of a subject's log.
type logRead struct {
	orders      idCounts // first deliveries by the order id they carry: one per message stored
	redelivered int      // deliveries past the first to the reading group (its acks lost), not counted
	foreign     []string // messages without an order id
}

// readLog reads every message of subject as a new consumer group that
// starts at the earliest message, until it has seen each of want and a
// pull comes back empty (the log's end), or timeout passes. Every message
// stored is delivered to the group once at least: a message stored twice
// counts twice.
func readLog(t *testing.T, servers, subject, group string, want map[string]bool, timeout time.Duration) logRead {
	t.Helper()
	pl, err := qmq.NewPuller(servers, subject, group, qmq.StartAt(qmq.Earliest), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	r := logRead{orders: idCounts{}}
	missing := len(want)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := pl.Pull(ctx, 1000, 500*time.Millisecond)
		cancel()
		if err != nil {
			t.Logf("read the log: pull: %v", err)
			continue
		}
		if len(got) == 0 && missing == 0 {
			break
		}
		for _, m := range got {
			if m.Deliveries() > 1 {
				r.redelivered++
				continue
			}
			order := m.String("order")
			if order == "" {
				r.foreign = append(r.foreign, m.ID())
				continue
			}
			r.orders[order]++
			if r.orders[order] == 1 && want[order] {
				missing--
			}
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		if err := pl.Ack(ctx, got...); err != nil {
			t.Logf("read the log: ack of %d messages: %v (they come again, and are not counted again)", len(got), err)
		}
		cancel()
	}
	return r
}

// orderCheck compares, for each order id, the producer's committed rows,
// the messages in the log and the consumer's effects.
type orderCheck struct {
	committed  map[string]bool // the rows of orders in the producer's database
	reported   *OrderEvents    // what the producers said they committed and rolled back
	log        idCounts        // messages stored, by order id
	effects    idCounts        // effect rows, by order id
	failures   []string
	exactlyOne int // committed orders with one message and one effect
}

// run checks that every committed order has exactly one message in the
// log and one effect; that nothing else is in either, rolled back least
// of all; and that the commits and rollbacks reported agree with the
// database.
func (c *orderCheck) run() {
	for id := range c.committed {
		if c.log[id] == 1 && c.effects[id] == 1 {
			c.exactlyOne++
		}
	}
	c.expect("committed orders without exactly one message in the log", func(yield func(string, string) bool) {
		for id := range c.committed {
			if n := c.log[id]; n != 1 && !yield(id, fmt.Sprintf("%d messages", n)) {
				return
			}
		}
	})
	c.expect("committed orders without exactly one effect", func(yield func(string, string) bool) {
		for id := range c.committed {
			if n := c.effects[id]; n != 1 && !yield(id, fmt.Sprintf("%d effects", n)) {
				return
			}
		}
	})
	c.expect("messages in the log of orders not committed", notIn(c.log, c.committed, c.reported.RolledBack))
	c.expect("effects of orders not committed", notIn(c.effects, c.committed, c.reported.RolledBack))
	c.expect("commits reported without the order's row", func(yield func(string, string) bool) {
		for id := range c.reported.Committed {
			if !c.committed[id] && !yield(id, "reported committed") {
				return
			}
		}
	})
	c.expect("rollbacks reported of orders whose row is there", func(yield func(string, string) bool) {
		for id := range c.reported.RolledBack {
			if c.committed[id] && !yield(id, "reported rolled back") {
				return
			}
		}
	})
}

// notIn yields the ids counted in counts that are not committed, saying
// which were rolled back.
func notIn(counts idCounts, committed, rolledBack map[string]bool) func(yield func(string, string) bool) {
	return func(yield func(string, string) bool) {
		for id, n := range counts {
			if committed[id] {
				continue
			}
			what := fmt.Sprintf("%d, never committed", n)
			if rolledBack[id] {
				what = fmt.Sprintf("%d, rolled back", n)
			}
			if !yield(id, what) {
				return
			}
		}
	}
}

// expect records a failure naming what and up to 10 of the ids found.
func (c *orderCheck) expect(what string, found func(yield func(id, detail string) bool)) {
	var ids []string
	n := 0
	for id, detail := range found {
		n++
		if len(ids) < 10 {
			ids = append(ids, fmt.Sprintf("%s (%s)", id, detail))
		}
	}
	if n > 0 {
		slices.Sort(ids)
		c.failures = append(c.failures, fmt.Sprintf("%d %s, e.g. %v", n, what, ids))
	}
}
