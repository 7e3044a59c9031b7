// Package outbox sends messages as part of a database transaction, and
// consumes them with their effects applied once (the transactional outbox
// and the idempotent consumer).
//
// An Outbox keeps each message to send in a row of the table qmq_outbox,
// written in the caller's transaction (Tx.Send): the message is sent if
// and only if the transaction commits. After a commit (Tx.Commit) its rows
// are sent at once through the Producer, each deleted when a broker
// acknowledges it. A row left behind (the process died, the broker was
// down, the send failed) is resent by a watchdog (RunWatchdog, or Sweep
// for one pass) with the same message id; the id was fixed when the row
// was written, so every send of it goes to the same broker group, and a
// resend within the broker's dedup window (10 minutes) is stored once.
// One watchdog among the processes that share a database resends at a
// time: the one holding the lease in qmq_outbox_lease.
//
// Sending is at least once: a message whose first send was stored but
// whose row outlived the dedup window (the broker was unreachable for
// longer than that after storing it) is stored twice. Idempotent wraps a
// consumer's handler so that its database effects are applied once per
// message id, whatever the number of deliveries.
//
// Every SQL difference between databases is in a Dialect: SQLite (the
// default), PostgreSQL and MySQL (MariaDB and MySQL).
package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/transport"
)

// ErrClosed is returned by a closed Outbox.
var ErrClosed = errors.New("outbox: closed")

// ErrConfig means a Config setting is out of its range.
var ErrConfig = errors.New("outbox: invalid config")

// ErrDuplicateID means the outbox already holds a message with the id
// of one given to Tx.Send: it is waiting to be sent.
var ErrDuplicateID = errors.New("outbox: a message with this id is already in the outbox")

// Sender sends messages; *qmq.Producer is one.
type Sender interface {
	// Check reports whether SendMessage would refuse m before sending it.
	Check(m *qmq.Message) error
	// SendMessage sends m and returns once a broker has stored it (or
	// found its id stored within its dedup window).
	SendMessage(ctx context.Context, m *qmq.Message) error
}

// Config configures an Outbox. A zero field takes its default.
type Config struct {
	// Dialect is the database's SQL dialect. Default SQLite.
	Dialect *Dialect
	// SendTimeout bounds one send of a row, its retries included; a row
	// not acknowledged by then waits for the watchdog. Default 30 s.
	SendTimeout time.Duration
	// MaxPending bounds the messages being sent at once, and those a Tx
	// keeps to send at its commit: a committed message over it is left for
	// the watchdog. Default 10,000.
	MaxPending int
	// MaxPendingBytes bounds the encoded bytes of the messages being sent
	// at once, of those a Tx keeps to send at its commit, and of a page
	// the watchdog reads: a committed message over it is left for the
	// watchdog, and a page stops short of it. At least
	// qmq.MaxMessageSize, so that a largest message is always sent.
	// Default 64 MiB.
	MaxPendingBytes int
	// Period is how often the watchdog takes or renews its lease and
	// resends what is left. Default 30 s.
	Period time.Duration
	// Grace is how old a row must be before the watchdog resends it, so
	// that it does not race the send that follows a commit. Default
	// Period.
	Grace time.Duration
	// LeaseTTL is how long a watchdog's lease lasts unless renewed: when
	// its holder stops without releasing it, another watchdog takes over
	// after at most this long. At least 2 × Period. Default 3 × Period.
	LeaseTTL time.Duration
	// Batch is how many rows the watchdog reads and resends at once, 1 to
	// 1,000. Default 100.
	Batch int
	// DedupWindow is the broker groups' dedup window (fsm.Config's
	// DedupWindow, 10 minutes in qmqd). Grace + Period + LeaseTTL must be at most half of
	// it, so that a row whose first send was stored is resent, even after
	// a change of watchdog, while the broker still knows its id. Default
	// 10 minutes.
	DedupWindow time.Duration
	// Owner names this Outbox as a lease holder: at most 128 bytes of
	// printable ASCII other than a space, as a message id. Default the
	// host name, the process id and a random suffix.
	Owner string
	// Logger receives warnings about sends that failed and rows that
	// cannot be sent. Default none.
	Logger hclog.Logger
	// Propagator puts the span context of Tx.Send's ctx in the message
	// written to the outbox, so that the trace runs from the span that
	// made the message, through the send after the commit (or the
	// watchdog's, later), to the consumers' handlers: the same as the
	// Producer's (qmq.WithPropagator). Default propagation.TraceContext,
	// the Producer's default: the W3C "traceparent" and "tracestate".
	Propagator propagation.TextMapPropagator
}

// maxBatch bounds Config.Batch: a batch's ids fill one IN list.
const maxBatch = 1000

func (c *Config) setDefaults() error {
	c.Dialect = cmp.Or(c.Dialect, SQLite)
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	c.SendTimeout = cmp.Or(c.SendTimeout, 30*time.Second)
	c.MaxPending = cmp.Or(c.MaxPending, 10_000)
	c.MaxPendingBytes = cmp.Or(c.MaxPendingBytes, 64<<20)
	c.Period = cmp.Or(c.Period, 30*time.Second)
	c.Grace = cmp.Or(c.Grace, c.Period)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, 3*c.Period)
	c.Batch = cmp.Or(c.Batch, 100)
	c.DedupWindow = cmp.Or(c.DedupWindow, 10*time.Minute)
	if c.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		rand.Read(b)
		c.Owner = fmt.Sprintf("%.80s-%d-%s", asKey(host), os.Getpid(), hex.EncodeToString(b))
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	switch {
	case c.SendTimeout < 0, c.MaxPending < 0, c.Period < 0, c.Grace < 0, c.DedupWindow < 0:
		return fmt.Errorf("%w: send timeout %s, most pending %d, period %s, grace %s and dedup window %s must be positive",
			ErrConfig, c.SendTimeout, c.MaxPending, c.Period, c.Grace, c.DedupWindow)
	case c.MaxPendingBytes < qmq.MaxMessageSize:
		return fmt.Errorf("%w: most pending bytes %d is under the largest message, %d bytes", ErrConfig, c.MaxPendingBytes, qmq.MaxMessageSize)
	case c.Batch < 1 || c.Batch > maxBatch:
		return fmt.Errorf("%w: batch %d (1..%d)", ErrConfig, c.Batch, maxBatch)
	case c.LeaseTTL < 2*c.Period:
		return fmt.Errorf("%w: lease TTL %s is under twice the period %s: the holder would lose it between renewals",
			ErrConfig, c.LeaseTTL, c.Period)
	case 2*(c.Grace+c.Period+c.LeaseTTL) > c.DedupWindow:
		return fmt.Errorf("%w: grace %s + period %s + lease TTL %s is over half the dedup window %s: a resend could come after the broker forgot the id",
			ErrConfig, c.Grace, c.Period, c.LeaseTTL, c.DedupWindow)
	}
	return checkKey("owner", c.Owner)
}

// Outbox sends messages written in database transactions. It is safe for
// concurrent use.
type Outbox struct {
	db  *sql.DB
	s   Sender
	cfg Config
	d   *Dialect
	log hclog.Logger

	mu           sync.Mutex
	pending      map[string]int // ids being sent, or acknowledged and being deleted → encoded size
	pendingBytes int            // the sum of pending's sizes
	idle         chan struct{}  // closed when pending empties; nil while no Flush waits
	closed       bool
	sends        sync.WaitGroup // a claim each, until released
	committed    [][]outgoing   // claimed at commits, waiting for a committed sender
	senders      int            // committed senders running
}

// maxCommittedSenders bounds the goroutines that send what commits
// claimed, and so the database connections their deletes take: while
// they are all busy, the commits' messages queue, and the next free one
// sends them all at once and deletes their rows in one statement.
const maxCommittedSenders = 4

// outgoing is a message to send and the size of its encoding, which
// counts against MaxPendingBytes.
type outgoing struct {
	m    *qmq.Message
	size int
}

// New returns an Outbox that keeps its rows in db and sends them with s
// (a *qmq.Producer), creating its tables if they do not exist. Neither db
// nor s is closed by Close.
//
// Set cfg.Dialect to the database's. With SQLite, open db with a busy timeout (modernc.org/sqlite:
// "?_pragma=busy_timeout(10000)"), as the outbox's deletes and the
// watchdog write beside the application's transactions.
func New(db *sql.DB, s Sender, cfg Config) (*Outbox, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.SendTimeout)
	defer cancel()
	if err := createTables(ctx, db, cfg.Dialect.schema()); err != nil {
		return nil, fmt.Errorf("outbox: create tables (%s): %w", cfg.Dialect.Name, err)
	}
	return &Outbox{db: db, s: s, cfg: cfg, d: cfg.Dialect, log: cfg.Logger, pending: map[string]int{}}, nil
}

// claim marks the messages of msgs that are not being sent as being sent,
// up to MaxPending messages and MaxPendingBytes bytes in all, and returns
// them; none once the Outbox is closed. Each returned message is released
// by release.
func (ob *Outbox) claim(msgs []outgoing) []outgoing {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.closed {
		return nil
	}
	var out []outgoing
	for _, o := range msgs {
		if _, busy := ob.pending[o.m.ID()]; busy || len(ob.pending) >= ob.cfg.MaxPending ||
			ob.pendingBytes+o.size > ob.cfg.MaxPendingBytes {
			continue
		}
		ob.pending[o.m.ID()] = o.size
		ob.pendingBytes += o.size
		out = append(out, o)
	}
	if len(out) > 0 {
		ob.sends.Add(1)
	}
	return out
}

func (ob *Outbox) release(msgs []outgoing) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for _, o := range msgs {
		ob.pendingBytes -= ob.pending[o.m.ID()]
		delete(ob.pending, o.m.ID())
	}
	if len(ob.pending) == 0 && ob.idle != nil {
		close(ob.idle)
		ob.idle = nil
	}
	ob.sends.Done()
}

// enqueue hands the messages a commit claimed to a committed sender,
// starting one if fewer than maxCommittedSenders run.
func (ob *Outbox) enqueue(claimed []outgoing) {
	ob.mu.Lock()
	ob.committed = append(ob.committed, claimed)
	start := ob.senders < maxCommittedSenders
	if start {
		ob.senders++
	}
	ob.mu.Unlock()
	if start {
		go ob.sendCommitted()
	}
}

// sendCommitted sends what commits claimed, all that is queued at a time,
// until the queue is empty.
func (ob *Outbox) sendCommitted() {
	for {
		ob.mu.Lock()
		claims := ob.committed
		ob.committed = nil
		if len(claims) == 0 {
			ob.senders--
			ob.mu.Unlock()
			return
		}
		ob.mu.Unlock()
		var msgs []outgoing
		for _, c := range claims {
			msgs = append(msgs, c...)
		}
		if rows, err := ob.committedRows(msgs); err != nil {
			ob.log.Warn("outbox: reading the committed rows to send: the watchdog will send them", "rows", len(msgs), "error", err)
		} else {
			ob.deliver(rows)
		}
		for _, c := range claims {
			ob.release(c)
		}
	}
}

// committedRows reads the rows of msgs' ids, as their transactions
// committed them, and returns their messages: a Send whose row a rollback
// to a savepoint took away is not among them, and an id written again
// after such a rollback is sent as its row holds it. One query per
// maxBatch ids, after the commit: it costs the committing transaction
// nothing.
func (ob *Outbox) committedRows(msgs []outgoing) ([]outgoing, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ob.cfg.SendTimeout)
	defer cancel()
	var out []outgoing
	for start := 0; start < len(msgs); start += maxBatch {
		chunk := msgs[start:min(start+maxBatch, len(msgs))]
		args := make([]any, len(chunk))
		for i, o := range chunk {
			args[i] = o.m.ID()
		}
		rs, err := ob.db.QueryContext(ctx, ob.d.rebind("SELECT id, payload FROM qmq_outbox WHERE id IN "+inList(len(chunk))), args...)
		if err != nil {
			return nil, err
		}
		for rs.Next() {
			var id string
			var payload []byte
			if err := rs.Scan(&id, &payload); err != nil {
				rs.Close()
				return nil, err
			}
			m := new(qmq.Message)
			if err := m.UnmarshalBinary(payload); err != nil {
				ob.log.Error("outbox row cannot be sent: left in the table", "id", id, "error", err)
				continue
			}
			out = append(out, outgoing{m, len(payload)})
		}
		err = rs.Err()
		if cerr := rs.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// send sends the messages of one claim and releases it; see deliver.
func (ob *Outbox) send(claimed []outgoing) (sent, refused int, err error) {
	defer ob.release(claimed)
	return ob.deliver(claimed)
}

// deliver sends messages at once (the Producer batches them) and deletes
// the rows of those acknowledged. It returns how many were acknowledged
// and deleted, how many a broker refused for their content (their rows
// stay, for an operator), and the first other error.
func (ob *Outbox) deliver(msgs []outgoing) (sent, refused int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), ob.cfg.SendTimeout)
	defer cancel()
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, o := range msgs {
		wg.Go(func() { errs[i] = ob.s.SendMessage(ctx, o.m) })
	}
	wg.Wait()
	var acked []string
	var first error
	for i, err := range errs {
		switch {
		case err == nil:
			acked = append(acked, msgs[i].m.ID())
		case refusedForGood(err):
			ob.log.Error("outbox send refused by the broker: the row stays in qmq_outbox for an operator", "id", msgs[i].m.ID(), "error", err)
			refused++
		default:
			ob.log.Warn("outbox send failed: the watchdog will resend", "id", msgs[i].m.ID(), "error", err)
			first = cmp.Or(first, err)
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), ob.cfg.SendTimeout)
	defer dcancel()
	if err := ob.delete(dctx, acked); err != nil {
		ob.log.Warn("outbox delete failed: the watchdog will resend, as a duplicate", "rows", len(acked), "error", err)
		return 0, refused, cmp.Or(first, err)
	}
	return len(acked), refused, first
}

// refusedForGood reports whether a broker refused a send for the
// message's content (INVALID, TOO_LARGE: a broker configured with a
// shorter maximum delay or a smaller maximum message than the producer
// checked against), which no resend changes.
func refusedForGood(err error) bool {
	var e *transport.Error
	return errors.As(err, &e) && (e.Code == transport.Invalid || e.Code == transport.TooLarge)
}

// delete deletes the rows of ids.
func (ob *Outbox) delete(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		n := min(len(ids), maxBatch)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		if _, err := ob.db.ExecContext(ctx, ob.d.rebind("DELETE FROM qmq_outbox WHERE id IN "+inList(n)), args...); err != nil {
			return fmt.Errorf("outbox: delete sent rows: %w", err)
		}
		ids = ids[n:]
	}
	return nil
}

// Flush waits until every message being sent has been acknowledged and
// its row deleted, or its send has failed (its row then waits for the
// watchdog), or ctx ends.
func (ob *Outbox) Flush(ctx context.Context) error {
	ob.mu.Lock()
	if len(ob.pending) == 0 {
		ob.mu.Unlock()
		return nil
	}
	if ob.idle == nil {
		ob.idle = make(chan struct{})
	}
	idle := ob.idle
	ob.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("outbox: flush: %w", ctx.Err())
	}
}

// Close stops sending: it waits for the sends under way (each at most
// SendTimeout), and leaves rows committed from now on to a watchdog.
// Begin and the watchdog then fail with ErrClosed. Idempotent.
func (ob *Outbox) Close() error {
	ob.mu.Lock()
	ob.closed = true
	ob.mu.Unlock()
	ob.sends.Wait()
	return nil
}

func (ob *Outbox) isClosed() bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.closed
}
