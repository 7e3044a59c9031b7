package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"sync"
	"time"

	"github.com/qmqgo/qmq"
)

// Tx is a database transaction that may send messages: Send writes each
// in the transaction, Commit commits it and then sends them. The
// transaction's own work goes through the embedded *sql.Tx. A Tx is for
// one goroutine at a time, as its *sql.Tx.
type Tx struct {
	*sql.Tx
	ob *Outbox

	mu    sync.Mutex
	msgs  []outgoing // to send after the commit (at most MaxPending)
	bytes int        // their encoded size (at most MaxPendingBytes)
}

// Begin starts a transaction (opts as for sql.DB.BeginTx).
func (ob *Outbox) Begin(ctx context.Context, opts *sql.TxOptions) (*Tx, error) {
	if ob.isClosed() {
		return nil, ErrClosed
	}
	tx, err := ob.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("outbox: begin: %w", err)
	}
	return ob.Wrap(tx), nil
}

// Wrap makes tx, a transaction begun on the Outbox's database by the
// caller, one that may send messages. Commit it with the Tx's Commit so
// that its messages are sent at once; committed any other way, its
// messages are sent by the watchdog (after Grace).
func (ob *Outbox) Wrap(tx *sql.Tx) *Tx { return &Tx{Tx: tx, ob: ob} }

// WithTx runs fn in a transaction: it commits (and sends fn's messages)
// when fn returns nil, and rolls back when fn fails or panics.
func (ob *Outbox) WithTx(ctx context.Context, fn func(*Tx) error) (err error) {
	tx, err := ob.Begin(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		if rerr := tx.Rollback(); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	return tx.Commit()
}

// Send writes m to the outbox in the transaction, to be sent when it
// commits. It first checks m as the Producer would (its subject's name,
// its size and each field's, its delivery time): a message the Producer
// would refuse is refused here, with its error wrapped, and the
// transaction is left as it was. A message whose id was not chosen
// (Message.SetID) gets its own id as its chosen one, so that every send
// and resend of it goes to the same broker group. What is sent is m as it
// is now: changing m afterwards changes nothing. A second message with the
// id of one still in the outbox is refused with ErrDuplicateID.
func (t *Tx) Send(ctx context.Context, m *qmq.Message) error {
	if m == nil {
		return errors.New("outbox: send: nil message")
	}
	if err := t.ob.s.Check(m); err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if err := m.SetID(m.ID()); err != nil {
		return fmt.Errorf("outbox: send %s: %w", m.ID(), err)
	}
	payload, err := m.MarshalBinary()
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	if traced, ok := t.withTraceContext(ctx, m, payload); ok {
		payload = traced
	}
	// The copy sent at the commit, decoded from what the row holds; none
	// over the bounds, where the row waits for the watchdog.
	var kept *qmq.Message
	if t.hasRoom(len(payload)) {
		kept = new(qmq.Message)
		if err := kept.UnmarshalBinary(payload); err != nil {
			return fmt.Errorf("outbox: %w", err)
		}
	}
	var deliverAt int64
	if at := m.DeliverAt(); !at.IsZero() {
		deliverAt = at.UnixMilli()
	}
	d := t.ob.d
	n, err := execCount(ctx, t.Tx, d.rebind(d.InsertIgnore("qmq_outbox", []string{"id", "subject", "payload", "deliver_at", "created_at"})),
		m.ID(), m.Subject(), payload, deliverAt, time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("outbox: send %s: %w", m.ID(), err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrDuplicateID, m.ID())
	}
	if kept != nil {
		t.mu.Lock()
		t.msgs = append(t.msgs, outgoing{kept, len(payload)})
		t.bytes += len(payload)
		t.mu.Unlock()
	}
	return nil
}

// withTraceContext returns the encoding of m with the span context of ctx
// in its properties (Config.Propagator), when ctx holds a valid span and m
// carries no context of its own: the row keeps where the message was
// made, which the send's span then links to (a send long after, by the
// watchdog, too). m itself is not changed. A message so near its limits
// that the context would take it over is kept without it (false), as the
// Producer does.
func (t *Tx) withTraceContext(ctx context.Context, m *qmq.Message, payload []byte) ([]byte, bool) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil, false
	}
	prop := t.ob.cfg.Propagator
	carrier := qmq.MessageCarrier(m)
	for _, f := range prop.Fields() {
		if carrier.Get(f) != "" {
			return nil, false
		}
	}
	var c qmq.Message
	if err := c.UnmarshalBinary(payload); err != nil {
		return nil, false
	}
	prop.Inject(ctx, qmq.MessageCarrier(&c))
	if t.ob.s.Check(&c) != nil {
		return nil, false
	}
	traced, err := c.MarshalBinary()
	return traced, err == nil
}

// hasRoom reports whether the Tx may keep one more message of size bytes
// to send at its commit, within MaxPending and MaxPendingBytes.
func (t *Tx) hasRoom(size int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.msgs) < t.ob.cfg.MaxPending && t.bytes+size <= t.ob.cfg.MaxPendingBytes
}

// Commit commits the transaction and then sends its messages, in the
// background: it returns once the commit is done (Flush waits for the
// sends). What is sent is what the committed rows hold: a message written
// after a savepoint that the transaction rolled back to (ORMs nest
// transactions that way) has no row, and is not sent (committedRows). A
// message whose send fails stays in the outbox for the watchdog.
func (t *Tx) Commit() error {
	if err := t.Tx.Commit(); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	t.mu.Lock()
	msgs := t.msgs
	t.msgs, t.bytes = nil, 0
	t.mu.Unlock()
	if claimed := t.ob.claim(msgs); len(claimed) > 0 {
		t.ob.enqueue(claimed)
	}
	return nil
}

// Rollback rolls the transaction back: none of its messages is sent.
func (t *Tx) Rollback() error {
	t.mu.Lock()
	t.msgs, t.bytes = nil, 0
	t.mu.Unlock()
	if err := t.Tx.Rollback(); err != nil {
		return fmt.Errorf("outbox: rollback: %w", err)
	}
	return nil
}
