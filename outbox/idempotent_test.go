package outbox

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// The same message handled twice is applied once; a failed handler
// applies nothing and records nothing, so the next delivery applies it; a
// scope of its own applies it again.
func TestIdempotentAppliesOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		h := db.idempotent(t, db.addToOrder, IdempotentConfig{Scope: "billing"})
		p := newProducer(t, "127.0.0.1:1")
		m := p.GenerateMessage("orders")
		m.SetInt("amount", 5)
		ctx := context.Background()
		for range 2 {
			if err := h(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		db.wantTotal(t, 5, "the same message twice")

		// A handler that fails after its effect: rolled back, a nack.
		fail := errors.New("the ledger is closed")
		failing := true
		hf := db.idempotent(t, func(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
			if err := db.addToOrder(ctx, tx, m); err != nil {
				return err
			}
			if failing {
				return fail
			}
			return nil
		}, IdempotentConfig{Scope: "billing"})
		m2 := p.GenerateMessage("orders")
		m2.SetInt("amount", 7)
		if err := hf(ctx, m2); !errors.Is(err, fail) {
			t.Fatalf("a failed handler = %v, want its error (a nack)", err)
		}
		db.wantTotal(t, 5, "a failed handler (rolled back)")
		failing = false
		if err := hf(ctx, m2); err != nil {
			t.Fatal(err)
		}
		db.wantTotal(t, 12, "the failed message came again")

		audit := db.idempotent(t, db.addToOrder, IdempotentConfig{Scope: "audit"})
		if err := audit(ctx, m); err != nil {
			t.Fatal(err)
		}
		db.wantTotal(t, 17, "another scope handled the first message")
	})
}

// A scope is refused at start unless it is at most 128 bytes of printable
// ASCII other than a space, as a message id: MySQL would take "billing"
// and "billing " for one scope, and two scopes of invalid UTF-8 for one;
// PostgreSQL would refuse such a scope at every message.
func TestIdempotentConfig(t *testing.T) {
	db := sqliteDB(t)
	for _, tc := range []struct {
		scope string
		ok    bool
	}{
		{"", true},
		{"billing.v2:eu-west_1", true},
		{"!~", true},
		{strings.Repeat("s", maxKey), true},
		{strings.Repeat("s", maxKey+1), false},
		{"billing ", false},
		{"bill ing", false},
		{"billing	", false},
		{"a\xff", false},
		{"a\x00", false},
		{"a\x7f", false},
		{"facturación", false},
	} {
		_, err := Idempotent(db.DB, db.addToOrder, IdempotentConfig{Scope: tc.scope})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("scope %q (%d bytes): %v, want ok %v", tc.scope, len(tc.scope), err, tc.ok)
		}
	}
	if _, err := Idempotent(db.DB, nil, IdempotentConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no handler: %v, want ErrConfig", err)
	}
}

// CleanProcessed deletes the ids older than its horizon, and only those:
// a deleted id is applied again, a kept one is not.
func TestCleanProcessed(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		h := db.idempotent(t, db.addToOrder, IdempotentConfig{})
		p := newProducer(t, "127.0.0.1:1")
		ctx := context.Background()
		old, recent := p.GenerateMessage("orders"), p.GenerateMessage("orders")
		for _, m := range []*qmq.Message{old, recent} {
			m.SetInt("amount", 1)
			if err := h(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		db.exec(t, "UPDATE qmq_processed SET processed_at = ? WHERE id = ?", time.Now().Add(-2*time.Hour).UnixMilli(), old.ID())
		if _, err := CleanProcessed(ctx, db.DB, db.d, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("CleanProcessed(0) = %v, want ErrConfig", err)
		}
		n, err := CleanProcessed(ctx, db.DB, db.d, time.Hour)
		if err != nil || n != 1 {
			t.Fatalf("CleanProcessed = %d, %v; want 1 deleted", n, err)
		}
		// The cleaned id is applied again; the recent one is still known.
		for _, m := range []*qmq.Message{old, recent} {
			if err := h(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		db.wantTotal(t, 3, "the cleaned id was applied again, the kept one not")
	})
}

// End to end: a message sent through an outbox and delivered twice (the
// first delivery's ack is lost after the handler committed: a nack here)
// is applied once.
func TestIdempotentSubscription(t *testing.T) {
	n := testcluster.Broker(t, nil)
	forEachDialect(t, func(t *testing.T, db *testDB) {
		subject := "orders." + db.name
		p := newProducer(t, n.ClientAddr())
		ob := db.newOutbox(t, p, Config{})
		h := db.idempotent(t, db.addToOrder, IdempotentConfig{Scope: "billing"})
		var deliveries atomic.Int32
		sub, err := qmq.Subscribe(n.ClientAddr(), subject, "billing", func(ctx context.Context, m *qmq.Message) error {
			if err := h(ctx, m); err != nil {
				return err
			}
			if deliveries.Add(1) == 1 {
				return qmq.RetryAfter(10 * time.Millisecond) // the effect is committed, the ack lost
			}
			return nil
		}, qmq.StartAt(qmq.Earliest), qmq.WithPullWait(500*time.Millisecond)) // Close need not wait out a long poll
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		ctx := context.Background()
		err = ob.WithTx(ctx, func(tx *Tx) error {
			m := p.GenerateMessage(subject)
			m.SetInt("amount", 9)
			return tx.Send(ctx, m)
		})
		if err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 20*time.Second, "the second delivery", func() bool { return deliveries.Load() >= 2 })
		db.wantTotal(t, 9, "two deliveries")
	})
}

// A delayed message sent through the outbox arrives not before its time.
func TestDelayedThroughOutbox(t *testing.T) {
	n := testcluster.Broker(t, nil)
	forEachDialect(t, func(t *testing.T, db *testDB) {
		subject := "reminders." + db.name
		p := newProducer(t, n.ClientAddr())
		ob := db.newOutbox(t, p, Config{})
		ctx := context.Background()
		m := p.GenerateMessage(subject)
		at := time.Now().Add(time.Second)
		m.SetDeliverAt(at)
		if err := ob.WithTx(ctx, func(tx *Tx) error { return tx.Send(ctx, m) }); err != nil {
			t.Fatal(err)
		}
		if err := ob.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if left := db.rowsLeft(t); left != 0 {
			t.Fatalf("%d rows left after the send", left)
		}
		got := make(chan time.Time, 1)
		sub, err := qmq.Subscribe(n.ClientAddr(), subject, "mail", func(_ context.Context, r *qmq.Message) error {
			if r.ID() == m.ID() {
				select {
				case got <- time.Now():
				default:
				}
			}
			return nil
		}, qmq.StartAt(qmq.Earliest), qmq.WithPullWait(500*time.Millisecond)) // Close need not wait out a long poll
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		select {
		case when := <-got:
			if when.Before(at.Truncate(time.Millisecond)) {
				t.Errorf("delivered at %s, before its time %s", when.Format(time.StampMilli), at.Format(time.StampMilli))
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the delayed message never arrived")
		}
	})
}
