package outbox

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/test/testcluster"
)

// A commit sends its messages and deletes their rows; each is stored once
// with the id it had in the outbox, routed as a chosen id.
func TestCommitSendsAndDeletes(t *testing.T) {
	n := testcluster.Broker(t, nil)
	forEachDialect(t, func(t *testing.T, db *testDB) {
		rec := newRecorder(newProducer(t, n.ClientAddr()))
		ob := db.newOutbox(t, rec, Config{})
		ctx := context.Background()
		subject := "orders." + db.name

		var ids []string
		err := ob.WithTx(ctx, func(tx *Tx) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (42, 'created')"); err != nil {
				return err
			}
			for i := range 3 {
				m := rec.p.GenerateMessage(subject)
				m.SetInt("n", int64(i))
				ids = append(ids, m.ID())
				if err := tx.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if left := db.rowsLeft(t); left != 0 {
			t.Errorf("%d rows left after the sends were acknowledged", left)
		}
		got := pullAll(t, n.ClientAddr(), subject, "billing", 3)
		for _, id := range ids {
			if got[id] != 1 {
				t.Errorf("message %s stored %d times, want once (got %v)", id, got[id], got)
			}
		}
		if s, _ := rec.sendsOf(ids[0]); s != 1 {
			t.Errorf("message sent %d times, want 1", s)
		}
	})
}

// A rolled back transaction sends nothing and leaves no row, of its own
// work or of its messages.
func TestRollbackSendsNothing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		rec := newRecorder(nil)
		ob := db.newOutbox(t, rec, Config{})
		ctx := context.Background()
		p := newProducer(t, "127.0.0.1:1")

		tx, err := ob.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (1, 'rolled back')"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Send(ctx, p.GenerateMessage("orders.created")); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		fail := errors.New("the order is refused")
		err = ob.WithTx(ctx, func(tx *Tx) error {
			if err := tx.Send(ctx, p.GenerateMessage("orders.created")); err != nil {
				return err
			}
			return fail
		})
		if !errors.Is(err, fail) {
			t.Fatalf("WithTx = %v, want the function's error", err)
		}
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if orders := db.count(t, "SELECT count(*) FROM orders"); db.rowsLeft(t) != 0 || orders != 0 || rec.total() != 0 {
			t.Errorf("after rollbacks: %d rows, %d orders, %d sends; want none", db.rowsLeft(t), orders, rec.total())
		}
		if _, err := ob.Sweep(ctx); err != nil || rec.total() != 0 {
			t.Errorf("a sweep after rollbacks: %v, %d sends; want none", err, rec.total())
		}
	})
}

// Send refuses what the Producer would refuse, at, under and over each
// limit, and leaves the transaction able to commit its other work (on
// PostgreSQL too, where an error in a statement aborts the transaction).
// What it accepts, of 1 MiB and more up to the largest message, is
// written and read back whole (MySQL's max_allowed_packet, PostgreSQL's
// bytea).
func TestSendRefusesBadMessages(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		p := newProducer(t, "127.0.0.1:1", qmq.WithMaxDelay(time.Hour))
		rec := newRecorder(p)
		rec.down.Store(true) // no broker: only what was kept matters
		ob := db.newOutbox(t, rec, Config{})
		ctx := context.Background()

		delayed := func(d time.Duration) *qmq.Message {
			m := p.GenerateMessage("orders")
			m.SetDeliverAt(time.Now().Add(d))
			return m
		}
		tx, err := ob.Begin(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		accepted := map[string][]byte{} // id → encoding
		for _, tc := range []struct {
			name string
			m    *qmq.Message
			want error // nil: accepted
		}{
			{"1 MiB and a byte", messageOfSize(t, p, "", 1<<20+1), nil},
			{"just under the size limit", messageOfSize(t, p, "", limits.MaxMessage-1), nil},
			{"at the size limit", messageOfSize(t, p, "", limits.MaxMessage), nil},
			{"just over the size limit", messageOfSize(t, p, "", limits.MaxMessage+1), qmq.ErrMessageTooLarge},
			{"subject at the name limit", p.GenerateMessage(strings.Repeat("s", limits.MaxName)), nil},
			{"subject over the name limit", p.GenerateMessage(strings.Repeat("s", limits.MaxName+1)), qmq.ErrInvalidName},
			{"subject with a space", p.GenerateMessage("orders created"), qmq.ErrInvalidName},
			{"delay just under the most", delayed(time.Hour - time.Minute), nil},
			{"delay over the most", delayed(time.Hour + time.Minute), qmq.ErrDelayTooLong},
		} {
			err := tx.Send(ctx, tc.m)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("%s: Send = %v, want %v", tc.name, err, tc.want)
			}
			if err == nil {
				b, err := tc.m.MarshalBinary()
				if err != nil {
					t.Fatal(err)
				}
				accepted[tc.m.ID()] = b
			}
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (1, 'kept')"); err != nil {
			t.Fatalf("the transaction is unusable after refused sends: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := db.count(t, "SELECT count(*) FROM orders"); n != 1 {
			t.Errorf("%d orders committed, want 1", n)
		}
		if n := db.rowsLeft(t); n != len(accepted) {
			t.Fatalf("%d messages kept, want the %d accepted", n, len(accepted))
		}

		// Read back by a watchdog.
		db.awaitSweepable(t, len(accepted), fastWatchdog.Grace)
		sweeper := newRecorder(nil)
		if n, err := db.newOutbox(t, sweeper, fastWatchdog).Sweep(ctx); n != len(accepted) || err != nil {
			t.Fatalf("sweep: %d sent, %v; want %d", n, err, len(accepted))
		}
		sweeper.mu.Lock()
		defer sweeper.mu.Unlock()
		for id, b := range accepted {
			m := sweeper.last[id]
			if m == nil {
				t.Errorf("%s (%d bytes) not read back", id, len(b))
				continue
			}
			if got, err := m.MarshalBinary(); err != nil || !bytes.Equal(got, b) {
				t.Errorf("%s: read back %d bytes (%v), want the %d written", id, len(got), err, len(b))
			}
		}
	})
}

// A second message with the id of one still in the outbox is refused,
// whether that one was written by this transaction or committed before,
// and the transaction goes on (PostgreSQL aborts a transaction at a
// constraint error: the insert must not raise one).
func TestSendRefusesAnIDInTheOutbox(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		rec := newRecorder(nil)
		rec.down.Store(true)
		ob := db.newOutbox(t, rec, Config{})
		p := newProducer(t, "127.0.0.1:1")
		ctx := context.Background()
		withID := func(id string) *qmq.Message {
			m := p.GenerateMessage("orders")
			if err := m.SetID(id); err != nil {
				t.Fatal(err)
			}
			return m
		}
		for i := range 2 {
			err := ob.WithTx(ctx, func(tx *Tx) error {
				if i == 0 {
					if err := tx.Send(ctx, withID("order-7")); err != nil {
						return err
					}
				}
				if err := tx.Send(ctx, withID("order-7")); !errors.Is(err, ErrDuplicateID) {
					t.Errorf("transaction %d: a second send of order-7 = %v, want ErrDuplicateID", i, err)
				}
				_, err := tx.ExecContext(ctx, db.rebind("INSERT INTO orders (id, note) VALUES (?, 'after the refusal')"), i)
				return err
			})
			if err != nil {
				t.Fatalf("transaction %d after a refused send: %v", i, err)
			}
		}
		if orders, rows := db.count(t, "SELECT count(*) FROM orders"), db.rowsLeft(t); orders != 2 || rows != 1 {
			t.Errorf("%d orders and %d rows committed, want 2 and 1", orders, rows)
		}
	})
}

// Ids that differ only in case are different messages: two rows in the
// outbox, each sent, and two messages applied by an idempotent consumer
// (MySQL's default collations ignore case).
func TestIDsDifferingInCase(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ob0, p := downOutbox(t, db, db.DB)
		ctx := context.Background()
		var msgs []*qmq.Message
		for _, id := range []string{"order-a", "ORDER-A", "Order-A"} {
			m := p.GenerateMessage("orders")
			if err := m.SetID(id); err != nil {
				t.Fatal(err)
			}
			m.SetInt("amount", 1)
			msgs = append(msgs, m)
		}
		err := ob0.WithTx(ctx, func(tx *Tx) error {
			for _, m := range msgs {
				if err := tx.Send(ctx, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("ids differing in case: %v", err)
		}
		if err := ob0.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := db.rowsLeft(t); n != 3 {
			t.Fatalf("%d rows, want 3", n)
		}
		db.exec(t, "UPDATE qmq_outbox SET created_at = 0") // past any grace
		rec := newRecorder(nil)
		ob := db.newOutbox(t, rec, fastWatchdog)
		if n, err := ob.Sweep(ctx); n != 3 || err != nil {
			t.Errorf("sweep: %d sent, %v; want 3", n, err)
		}
		for _, m := range msgs {
			if s, _ := rec.sendsOf(m.ID()); s != 1 {
				t.Errorf("%s sent %d times, want once", m.ID(), s)
			}
		}

		h := db.idempotent(t, db.addToOrder, IdempotentConfig{})
		for _, m := range append(msgs, msgs...) {
			if err := h(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		db.wantTotal(t, 3, "three ids differing in case, each handled twice")
	})
}

// What a message is when Send returns is what is sent: a change made to
// it afterwards changes nothing.
func TestSendKeepsTheMessageAsItWas(t *testing.T) {
	db := sqliteDB(t)
	rec := newRecorder(nil)
	ob := db.newOutbox(t, rec, Config{})
	p := newProducer(t, "127.0.0.1:1")
	ctx := context.Background()
	m := p.GenerateMessage("orders")
	m.SetBody([]byte("before"))
	if err := ob.WithTx(ctx, func(tx *Tx) error { return tx.Send(ctx, m) }); err != nil {
		t.Fatal(err)
	}
	m.SetBody([]byte("after"))
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if got := rec.last[m.ID()]; got == nil || string(got.Body()) != "before" {
		t.Errorf("sent %v, want the body as it was at Send", got)
	}
}

func TestConfigLimits(t *testing.T) {
	db := sqliteDB(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		// 2 × (grace + period + lease TTL) against a 10-minute window.
		{"at half the dedup window", Config{Period: time.Minute, Grace: 40 * time.Second, LeaseTTL: 200 * time.Second}, true},
		{"just over half the dedup window", Config{Period: time.Minute, Grace: 40*time.Second + time.Millisecond, LeaseTTL: 200 * time.Second}, false},
		{"a 5-minute period", Config{Period: 5 * time.Minute}, false},
		{"lease TTL of twice the period", Config{Period: time.Second, LeaseTTL: 2 * time.Second}, true},
		{"lease TTL under twice the period", Config{Period: time.Second, LeaseTTL: 2*time.Second - time.Millisecond}, false},
		{"batch at its most", Config{Batch: maxBatch}, true},
		{"batch over its most", Config{Batch: maxBatch + 1}, false},
		{"negative grace", Config{Grace: -time.Second}, false},
		{"owner at its most", Config{Owner: strings.Repeat("o", 128)}, true},
		{"owner over its most", Config{Owner: strings.Repeat("o", 129)}, false},
		// An owner is compared byte by byte on every database (MySQL's
		// collations ignore trailing spaces).
		{"owner of printable ASCII", Config{Owner: "host-1.example:42!~"}, true},
		{"owner with a trailing space", Config{Owner: "host-1 "}, false},
		{"owner with a space", Config{Owner: "host 1"}, false},
		{"owner with invalid UTF-8", Config{Owner: "host\xff"}, false},
		{"owner with a NUL", Config{Owner: "host\x00"}, false},
	} {
		_, err := New(db.DB, newRecorder(nil), tc.cfg)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: New = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// The default owner is made of the host name, whatever bytes it holds,
// as a key the config takes.
func TestDefaultOwnerIsAKey(t *testing.T) {
	for _, host := range []string{"db-1.example", "höst name", "h\xff\x00st"} {
		if k := asKey(host); checkKey("owner", k) != nil {
			t.Errorf("asKey(%q) = %q, not a valid key", host, k)
		}
	}
	if got := asKey("db-1.example"); got != "db-1.example" {
		t.Errorf("asKey changed a valid host name to %q", got)
	}
}

func TestClosedOutbox(t *testing.T) {
	ob := sqliteDB(t).newOutbox(t, newRecorder(nil), Config{})
	ob.Close()
	ctx := context.Background()
	if _, err := ob.Begin(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Begin after Close = %v, want ErrClosed", err)
	}
	if err := ob.RunWatchdog(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("RunWatchdog after Close = %v, want ErrClosed", err)
	}
}

// A message written after a savepoint that the transaction rolled back to
// (as ORMs nest transactions) is not sent at the commit, nor left for the
// watchdog; one written before it, and one written again after, are.
// (Every message Send was given went out, the rolled-back one too.)
func TestSavepointRolledBackSendsNothingOfIt(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		rec := newRecorder(nil)
		ob := db.newOutbox(t, rec, Config{})
		ctx := context.Background()
		p := newProducer(t, "127.0.0.1:1")
		kept, undone, again := p.GenerateMessage("orders.created"), p.GenerateMessage("orders.created"), p.GenerateMessage("orders.created")
		again.SetID("order-7")
		undoneAgain := p.GenerateMessage("orders.created")
		undoneAgain.SetID("order-7")
		undoneAgain.SetString("version", "rolled back")
		again.SetString("version", "kept")
		err := ob.WithTx(ctx, func(tx *Tx) error {
			if err := tx.Send(ctx, kept); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "SAVEPOINT nested"); err != nil {
				return err
			}
			for _, m := range []*qmq.Message{undone, undoneAgain} {
				if err := tx.Send(ctx, m); err != nil {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT nested"); err != nil {
				return err
			}
			return tx.Send(ctx, again)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _ := rec.sendsOf(undone.ID()); s != 0 {
			t.Errorf("the message written after the savepoint rolled back to was sent %d times", s)
		}
		if s, _ := rec.sendsOf(kept.ID()); s != 1 {
			t.Errorf("the message written before the savepoint was sent %d times, want once", s)
		}
		rec.mu.Lock()
		last := rec.last["order-7"]
		s := rec.sends["order-7"]
		rec.mu.Unlock()
		if v := last.String("version"); s != 1 || v != "kept" {
			t.Errorf("order-7 sent %d times, last as %q; want once, as written after the rollback", s, v)
		}
		if left := db.rowsLeft(t); left != 0 {
			t.Errorf("%d rows left", left)
		}
		if _, err := ob.Sweep(ctx); err != nil || rec.total() != 2 {
			t.Errorf("a sweep: %v, %d sends in all; want the 2", err, rec.total())
		}
	})
}
