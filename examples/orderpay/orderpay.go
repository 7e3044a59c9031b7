package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/outbox"
)

// subject and group are where orders go: the order service sends to
// subject, the payment service consumes it as group.
const (
	subject = "orders.created"
	group   = "payments"
)

// errDeclined declines an order: returned inside its transaction, it rolls
// back the order and its message.
var errDeclined = errors.New("card declined")

// tables are the services' own. payments has no unique key on order_id, so
// that an order paid twice would show as two rows, not as an error.
var tables = []string{
	"CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)",
	"CREATE TABLE IF NOT EXISTS payments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL, message_id TEXT NOT NULL)",
}

// summary is what a run did.
type summary struct {
	placed      []string // the orders placed and paid
	declined    string   // the order rolled back
	redelivered int      // deliveries after a message's first one
}

// run places cfg.orders orders (and one declined) and waits until every
// one is paid and the message whose acknowledgement was lost has come
// again, printing what happens to out. It fails if an order is paid more
// than once, or if that does not happen within cfg.timeout.
func run(ctx context.Context, cfg config, out *printer) (*summary, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	// A busy timeout, because the outbox, its watchdog and the consumer
	// write beside one another and SQLite serialises writers; WAL, so that
	// readers do not wait for them.
	db, err := sql.Open("sqlite", "file:"+cfg.db+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	for _, q := range tables {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("orderpay: create tables in %s: %w", cfg.db, err)
		}
	}
	p, err := qmq.NewProducer(cfg.server)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	// SendTimeout bounds how long Close waits for a send under way: short,
	// so that the program is quick to give up on a queue that is down (the
	// rows stay, for the watchdog of the next run).
	ob, err := outbox.New(db, p, outbox.Config{Period: cfg.period, SendTimeout: 5 * time.Second, Logger: cfg.logger}) // creates qmq_outbox
	if err != nil {
		return nil, err
	}
	defer ob.Close()
	watchdog, stopWatchdog := context.WithCancel(context.Background())
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		ob.RunWatchdog(watchdog) // releases its lease when stopped
	}()
	defer func() { stopWatchdog(); <-watchdogDone }()

	runID := newRunID()
	orderID := func(n int) string { return fmt.Sprintf("%s-%d", runID, n) }
	out.printf("orderpay: run %s, database %s, queue %s", runID, cfg.db, cfg.server)

	pay, err := newPaymentService(db, out, orderID(1))
	if err != nil {
		return nil, err
	}
	sub, err := qmq.Subscribe(cfg.server, subject, group, pay.handle,
		qmq.StartAt(qmq.Earliest),     // a new group gets what was sent before it
		qmq.WithPullWait(time.Second)) // and Close need not wait out a long poll
	if err != nil {
		return nil, err
	}
	defer sub.Close() // first of the deferred calls: handlers finish and ack before the rest closes

	orders := &orderService{db: db, ob: ob, p: p, out: out}
	sum := &summary{declined: runID + "-declined"}
	for n := 1; n <= cfg.orders; n++ {
		place := orders.place
		if n == cfg.orders {
			place = orders.placeAndDie
		}
		if err := place(ctx, orderID(n), int64(500+250*n)); err != nil {
			return nil, err
		}
		sum.placed = append(sum.placed, orderID(n))
		if n == 1 {
			if err := orders.decline(ctx, sum.declined, 9900); err != nil {
				return nil, err
			}
		}
	}

	if err := awaitPaid(ctx, db, runID, len(sum.placed)); err != nil {
		return nil, err
	}
	select {
	case <-pay.again:
	case <-ctx.Done():
		return nil, fmt.Errorf("orderpay: the message of order %s did not come again: %w", pay.loseAckOf, ctx.Err())
	}
	if err := checkPaidOnce(ctx, db, sum); err != nil {
		return nil, err
	}
	if err := ob.Flush(ctx); err != nil {
		return nil, err
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM qmq_outbox").Scan(&left); err != nil {
		return nil, err
	}
	sum.redelivered = int(pay.redelivered.Load())
	out.printf("orderpay: orders placed: %d, each paid once (messages delivered again: %d); order %s rolled back: no order, no message, no payment; rows left in qmq_outbox: %d",
		len(sum.placed), sum.redelivered, sum.declined, left)
	return sum, nil
}

// orderService places orders: each order's row and its orders.created
// message are written in one transaction.
type orderService struct {
	db  *sql.DB
	ob  *outbox.Outbox
	p   *qmq.Producer
	out *printer
}

// place writes the order and its message in one transaction; the message
// is sent once the transaction commits.
func (s *orderService) place(ctx context.Context, id string, amount int64) error {
	err := s.ob.WithTx(ctx, func(tx *outbox.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?, ?)", id, amount); err != nil {
			return err
		}
		return tx.Send(ctx, s.created(id, amount))
	})
	if err != nil {
		return fmt.Errorf("orderpay: place order %s: %w", id, err)
	}
	s.out.printf("order service: order %s placed (%s): committed with its %s, which is sent now", id, money(amount), subject)
	return nil
}

// decline writes the order and its message, then finds the card declined:
// the transaction rolls back, and with it the order and the message.
func (s *orderService) decline(ctx context.Context, id string, amount int64) error {
	err := s.ob.WithTx(ctx, func(tx *outbox.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?, ?)", id, amount); err != nil {
			return err
		}
		if err := tx.Send(ctx, s.created(id, amount)); err != nil {
			return err
		}
		return errDeclined
	})
	if err == nil {
		return fmt.Errorf("orderpay: declined order %s committed", id)
	} else if !errors.Is(err, errDeclined) {
		return fmt.Errorf("orderpay: decline order %s: %w", id, err)
	}
	s.out.printf("order service: order %s (%s): %v: rolled back, the order and its message with it", id, money(amount), err)
	return nil
}

// placeAndDie writes the order and its message, and commits as a process
// that dies right after its commit leaves it: the transaction is committed
// outside the outbox (the *sql.Tx's own Commit), so nothing sends the
// message but the watchdog.
func (s *orderService) placeAndDie(ctx context.Context, id string, amount int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	otx := s.ob.Wrap(tx)
	if _, err := otx.ExecContext(ctx, "INSERT INTO orders (id, amount) VALUES (?, ?)", id, amount); err != nil {
		tx.Rollback()
		return fmt.Errorf("orderpay: place order %s: %w", id, err)
	}
	if err := otx.Send(ctx, s.created(id, amount)); err != nil {
		tx.Rollback()
		return fmt.Errorf("orderpay: place order %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("orderpay: place order %s: %w", id, err)
	}
	s.out.printf("order service: order %s placed (%s): committed, and the process dies before sending: %s waits in qmq_outbox for the watchdog",
		id, money(amount), subject)
	return nil
}

// created is the message that says an order was placed.
func (s *orderService) created(id string, amount int64) *qmq.Message {
	m := s.p.GenerateMessage(subject)
	m.SetString("order", id)
	m.SetInt("amount", amount)
	return m
}

// paymentService pays each order it is told of, once.
type paymentService struct {
	db          *sql.DB
	out         *printer
	once        qmq.Handler   // pay, through outbox.Idempotent
	loseAckOf   string        // the order whose first acknowledgement is lost
	lost        atomic.Bool   // it was lost
	again       chan struct{} // closed once its message was handled again
	againOnce   sync.Once
	redelivered atomic.Int64 // deliveries of a message after its first
}

func newPaymentService(db *sql.DB, out *printer, loseAckOf string) (*paymentService, error) {
	s := &paymentService{db: db, out: out, loseAckOf: loseAckOf, again: make(chan struct{})}
	once, err := outbox.Idempotent(db, s.pay, outbox.IdempotentConfig{Scope: group}) // creates qmq_processed
	if err != nil {
		return nil, err
	}
	s.once = once
	return s, nil
}

// pay writes the payment, in the transaction in which the idempotent
// consumer records the message's id: both commit, or neither.
func (s *paymentService) pay(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
	order, amount, _ := orderOf(m)
	_, err := tx.ExecContext(ctx, "INSERT INTO payments (order_id, amount, message_id) VALUES (?, ?, ?)", order, amount, m.ID())
	return err
}

// handle is the subscription's handler: it pays through the idempotent
// consumer, then says how many payments the order has.
func (s *paymentService) handle(ctx context.Context, m *qmq.Message) error {
	order, amount, ok := orderOf(m)
	if !ok {
		s.out.printf("payment service: message %s is not an order: acknowledged, nothing paid", m.ID())
		return nil
	}
	if m.Deliveries() > 1 {
		s.redelivered.Add(1)
	}
	if err := s.once(ctx, m); err != nil {
		s.out.printf("payment service: order %s: %v (it comes again)", order, err)
		return err // a nack
	}
	var payments int
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM payments WHERE order_id = ?", order).Scan(&payments); err != nil {
		return err
	}
	s.out.printf("payment service: order %s (%s): payments %d, after delivery %d of message %s",
		order, money(amount), payments, m.Deliveries(), m.ID())
	if order != s.loseAckOf {
		return nil
	}
	if s.lost.CompareAndSwap(false, true) {
		// The payment is committed; failing now is what a lost
		// acknowledgement looks like to the queue: the message comes again.
		s.out.printf("payment service: the acknowledgement of message %s is lost: it comes again", m.ID())
		return qmq.RetryAfter(100 * time.Millisecond)
	}
	s.againOnce.Do(func() { close(s.again) })
	return nil
}

// orderOf reads an orders.created message; ok is false for any other
// message (the quick start's sends to orders.created, say).
func orderOf(m *qmq.Message) (order string, amount int64, ok bool) {
	amount, err := m.Int("amount")
	order = m.String("order")
	return order, amount, err == nil && order != ""
}

// awaitPaid polls until the run's orders (ids runID-N) all have a payment.
func awaitPaid(ctx context.Context, db *sql.DB, runID string, want int) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var paid int
		err := db.QueryRowContext(ctx, "SELECT count(DISTINCT p.order_id) FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.id LIKE ?",
			runID+"-%").Scan(&paid)
		if err == nil && paid >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("orderpay: %d of %d orders paid: %w (is the queue running? make run)", paid, want, ctx.Err())
		case <-tick.C:
		}
	}
}

// checkPaidOnce checks that each placed order has one payment, and the
// declined order neither a row nor a payment.
func checkPaidOnce(ctx context.Context, db *sql.DB, sum *summary) error {
	for _, id := range sum.placed {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM payments WHERE order_id = ?", id).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("orderpay: order %s has %d payments, want 1", id, n)
		}
	}
	var n int
	err := db.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM orders WHERE id = ?) + (SELECT count(*) FROM payments WHERE order_id = ?)",
		sum.declined, sum.declined).Scan(&n)
	if err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("orderpay: the declined order %s has %d rows of orders and payments, want none", sum.declined, n)
	}
	return nil
}

// newRunID returns a short random name for this run's orders, so that
// runs on one database, or on one queue, do not mix them up.
func newRunID() string {
	b := make([]byte, 3)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// money formats an amount in cents.
func money(cents int64) string { return fmt.Sprintf("%d.%02d", cents/100, cents%100) }

// printer prints lines from several goroutines, each with the time since
// the run began.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newPrinter(w io.Writer) *printer { return &printer{w: w, start: time.Now()} }

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "%6.3fs  %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}
