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
	"github.com/qmqgo/qmq/internal/await"
	"github.com/qmqgo/qmq/internal/testcluster"
)

// addToOrder is a handler whose effect shows how often it was applied: it
// adds the message's "amount" to order 1's total.
func addToOrder(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
	amount, err := m.Int("amount")
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO totals (id, total) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET total = total + excluded.total", amount)
	return err
}

// wantTotal checks that order 1's total is want after what happened.
func wantTotal(t *testing.T, db *sql.DB, want int, after string) {
	t.Helper()
	if got := count(t, db, "SELECT coalesce(sum(total), 0) FROM totals"); got != want {
		t.Errorf("total %d after %s, want %d", got, after, want)
	}
}

func totalsDB(t *testing.T) *sql.DB {
	db := tempDB(t)
	if _, err := db.Exec("CREATE TABLE totals (id INTEGER PRIMARY KEY, total INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return db
}

// The same message handled twice is applied once; a failed handler
// applies nothing and records nothing, so the next delivery applies it; a
// scope of its own applies it again.
func TestIdempotentAppliesOnce(t *testing.T) {
	db := totalsDB(t)
	h, err := Idempotent(db, addToOrder, IdempotentConfig{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, "127.0.0.1:1")
	m := p.GenerateMessage("orders")
	m.SetInt("amount", 5)
	ctx := context.Background()
	for range 2 {
		if err := h(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	wantTotal(t, db, 5, "the same message twice")

	// A handler that fails after its effect: rolled back, a nack.
	fail := errors.New("the ledger is closed")
	failing := true
	hf, err := Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
		if err := addToOrder(ctx, tx, m); err != nil {
			return err
		}
		if failing {
			return fail
		}
		return nil
	}, IdempotentConfig{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	m2 := p.GenerateMessage("orders")
	m2.SetInt("amount", 7)
	if err := hf(ctx, m2); !errors.Is(err, fail) {
		t.Fatalf("a failed handler = %v, want its error (a nack)", err)
	}
	wantTotal(t, db, 5, "a failed handler (rolled back)")
	failing = false
	if err := hf(ctx, m2); err != nil {
		t.Fatal(err)
	}
	wantTotal(t, db, 12, "the failed message came again")

	audit, err := Idempotent(db, addToOrder, IdempotentConfig{Scope: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if err := audit(ctx, m); err != nil {
		t.Fatal(err)
	}
	wantTotal(t, db, 17, "another scope handled the first message")
}

func TestIdempotentConfig(t *testing.T) {
	db := tempDB(t)
	for _, tc := range []struct {
		scope string
		ok    bool
	}{{"", true}, {strings.Repeat("s", maxScope), true}, {strings.Repeat("s", maxScope+1), false}} {
		_, err := Idempotent(db, addToOrder, IdempotentConfig{Scope: tc.scope})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("scope of %d bytes: %v, want ok %v", len(tc.scope), err, tc.ok)
		}
	}
	if _, err := Idempotent(db, nil, IdempotentConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no handler: %v, want ErrConfig", err)
	}
}

func TestCleanProcessed(t *testing.T) {
	db := totalsDB(t)
	h, err := Idempotent(db, addToOrder, IdempotentConfig{})
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, "127.0.0.1:1")
	ctx := context.Background()
	old, recent := p.GenerateMessage("orders"), p.GenerateMessage("orders")
	for _, m := range []*qmq.Message{old, recent} {
		m.SetInt("amount", 1)
		if err := h(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("UPDATE qmq_processed SET processed_at = ? WHERE id = ?", time.Now().Add(-2*time.Hour).UnixMilli(), old.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := CleanProcessed(ctx, db, nil, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("CleanProcessed(0) = %v, want ErrConfig", err)
	}
	n, err := CleanProcessed(ctx, db, nil, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("CleanProcessed = %d, %v; want 1 deleted", n, err)
	}
	// The cleaned id is applied again; the recent one is still known.
	for _, m := range []*qmq.Message{old, recent} {
		if err := h(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	wantTotal(t, db, 3, "the cleaned id was applied again, the kept one not")
}

// End to end: a message sent through an outbox and delivered twice (the
// first delivery's ack is lost after the handler committed: a nack here)
// is applied once.
func TestIdempotentSubscription(t *testing.T) {
	n := testcluster.Broker(t, nil)
	db := totalsDB(t)
	p := newProducer(t, n.ClientAddr())
	ob := newOutbox(t, db, p, Config{})
	h, err := Idempotent(db, addToOrder, IdempotentConfig{Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	var deliveries atomic.Int32
	sub, err := qmq.Subscribe(n.ClientAddr(), "orders", "billing", func(ctx context.Context, m *qmq.Message) error {
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
		m := p.GenerateMessage("orders")
		m.SetInt("amount", 9)
		return tx.Send(ctx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	await.True(t, 20*time.Second, "the second delivery", func() bool { return deliveries.Load() >= 2 })
	wantTotal(t, db, 9, "two deliveries")
}

// A delayed message sent through the outbox arrives not before its time.
func TestDelayedThroughOutbox(t *testing.T) {
	n := testcluster.Broker(t, nil)
	db := tempDB(t)
	p := newProducer(t, n.ClientAddr())
	ob := newOutbox(t, db, p, Config{})
	ctx := context.Background()
	m := p.GenerateMessage("reminders")
	at := time.Now().Add(1500 * time.Millisecond)
	m.SetDeliverAt(at)
	if err := ob.WithTx(ctx, func(tx *Tx) error { return tx.Send(ctx, m) }); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if left := rowsLeft(t, db); left != 0 {
		t.Fatalf("%d rows left after the send", left)
	}
	got := make(chan time.Time, 1)
	sub, err := qmq.Subscribe(n.ClientAddr(), "reminders", "mail", func(_ context.Context, r *qmq.Message) error {
		if r.ID() == m.ID() {
			select {
			case got <- time.Now():
			default:
			}
		}
		return nil
	}, qmq.StartAt(qmq.Earliest))
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
}
