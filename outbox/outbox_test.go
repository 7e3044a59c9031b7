package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/testcluster"
	"github.com/qmqgo/qmq/internal/testmsg"
)

// A commit sends its messages and deletes their rows; each is stored once
// with the id it had in the outbox, routed as a chosen id.
func TestCommitSendsAndDeletes(t *testing.T) {
	n := testcluster.Broker(t, nil)
	db := tempDB(t)
	rec := newRecorder(newProducer(t, n.ClientAddr()))
	ob := newOutbox(t, db, rec, Config{})
	ctx := context.Background()

	var ids []string
	err := ob.WithTx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (42, 'created')"); err != nil {
			return err
		}
		for i := range 3 {
			m := rec.p.GenerateMessage("orders.created")
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
	if left := rowsLeft(t, db); left != 0 {
		t.Errorf("%d rows left after the sends were acknowledged", left)
	}
	got := pullAll(t, n.ClientAddr(), "orders.created", "billing", 3)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("message %s stored %d times, want once (got %v)", id, got[id], got)
		}
	}
	if s, _ := rec.sendsOf(ids[0]); s != 1 {
		t.Errorf("message sent %d times, want 1", s)
	}
}

// A rolled back transaction sends nothing and leaves no row.
func TestRollbackSendsNothing(t *testing.T) {
	db := tempDB(t)
	rec := newRecorder(nil)
	ob := newOutbox(t, db, rec, Config{})
	ctx := context.Background()
	p := newProducer(t, "127.0.0.1:1")

	tx, err := ob.Begin(ctx, nil)
	if err != nil {
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
	if rowsLeft(t, db) != 0 || rec.total() != 0 {
		t.Errorf("after rollbacks: %d rows, %d sends; want none", rowsLeft(t, db), rec.total())
	}
	if _, err := ob.Sweep(ctx); err != nil || rec.total() != 0 {
		t.Errorf("a sweep after rollbacks: %v, %d sends; want none", err, rec.total())
	}
}

// Send refuses what the Producer would refuse, at, under and over each
// limit, and leaves the transaction able to commit its other work.
func TestSendRefusesBadMessages(t *testing.T) {
	db := tempDB(t)
	p := newProducer(t, "127.0.0.1:1", qmq.WithMaxDelay(time.Hour))
	rec := newRecorder(p)
	rec.down.Store(true) // no broker: only what was kept matters
	ob := newOutbox(t, db, rec, Config{})
	ctx := context.Background()

	ofSize := func(size int) *qmq.Message {
		m := p.GenerateMessage("orders")
		w := testmsg.OfSize(m.ID(), "orders", 0, size) // the creation time is 8 bytes whatever its value
		m.SetBody(w.Body)
		for _, pr := range w.Properties {
			m.SetString(pr.Key, pr.Value)
		}
		return m
	}
	delayed := func(d time.Duration) *qmq.Message {
		m := p.GenerateMessage("orders")
		m.SetDeliverAt(time.Now().Add(d))
		return m
	}
	tx, err := ob.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    *qmq.Message
		want error // nil: accepted
	}{
		{"just under the size limit", ofSize(limits.MaxMessage - 1), nil},
		{"at the size limit", ofSize(limits.MaxMessage), nil},
		{"just over the size limit", ofSize(limits.MaxMessage + 1), qmq.ErrMessageTooLarge},
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
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (1, 'kept')"); err != nil {
		t.Fatalf("the transaction is unusable after refused sends: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT count(*) FROM orders"); n != 1 {
		t.Errorf("%d orders committed, want 1", n)
	}
	if n := rowsLeft(t, db); n != 4 {
		t.Errorf("%d messages kept, want the 4 accepted", n)
	}
}

// A second message with the id of one still in the outbox is refused.
func TestSendRefusesAnIDInTheOutbox(t *testing.T) {
	db := tempDB(t)
	rec := newRecorder(nil)
	rec.down.Store(true)
	ob := newOutbox(t, db, rec, Config{})
	p := newProducer(t, "127.0.0.1:1")
	ctx := context.Background()
	for i := range 2 {
		m := p.GenerateMessage("orders")
		if err := m.SetID("order-7"); err != nil {
			t.Fatal(err)
		}
		err := ob.WithTx(ctx, func(tx *Tx) error { return tx.Send(ctx, m) })
		if i == 0 && err != nil || i == 1 && !errors.Is(err, ErrDuplicateID) {
			t.Errorf("send %d: %v", i, err)
		}
	}
}

// What a message is when Send returns is what is sent: a change made to
// it afterwards changes nothing.
func TestSendKeepsTheMessageAsItWas(t *testing.T) {
	db := tempDB(t)
	rec := newRecorder(nil)
	ob := newOutbox(t, db, rec, Config{})
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
	db := tempDB(t)
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
	} {
		_, err := New(db, newRecorder(nil), tc.cfg)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: New = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestClosedOutbox(t *testing.T) {
	ob := newOutbox(t, tempDB(t), newRecorder(nil), Config{})
	ob.Close()
	ctx := context.Background()
	if _, err := ob.Begin(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Begin after Close = %v, want ErrClosed", err)
	}
	if err := ob.RunWatchdog(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("RunWatchdog after Close = %v, want ErrClosed", err)
	}
}
