package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/qmqgo/qmq"
)

// IdempotentConfig configures Idempotent. A zero field takes its default.
type IdempotentConfig struct {
	// Dialect is the database's SQL dialect. Default SQLite.
	Dialect *Dialect
	// Scope names what processes the messages: at most 128 bytes of
	// printable ASCII other than a space, as a message id (a consumer
	// group's name is one). Each scope applies a message once. Consumers
	// of different consumer groups that share a database each need their
	// own scope (their group's name, say), as each group gets every
	// message. Default "".
	Scope string
	// TxOptions are the options of each handler's transaction. Default
	// nil (the database's defaults).
	TxOptions *sql.TxOptions
}

// Idempotent returns a qmq.Handler that applies h's database effects once
// per message id, however often the message is delivered. For each
// message it begins a transaction and records the id in qmq_processed
// (created if it does not exist); if the id is there already, the message
// was processed: it commits nothing and acknowledges it. Otherwise it runs
// h in the same transaction and commits: the effects and the record of the
// id are committed together or not at all. An error from h (or from the
// commit) rolls everything back and is returned, a nack: the message comes
// again.
//
// Effects outside the database (a mail sent, a call made) are not covered:
// they may happen once per delivery. Ids are kept until CleanProcessed
// deletes them, which must not be before the message can no longer come
// again (see CleanProcessed).
func Idempotent(db *sql.DB, h func(ctx context.Context, tx *sql.Tx, m *qmq.Message) error, cfg IdempotentConfig) (qmq.Handler, error) {
	if cfg.Dialect == nil {
		cfg.Dialect = SQLite
	}
	if err := checkKey("scope", cfg.Scope); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: no handler", ErrConfig)
	}
	d := cfg.Dialect
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := createTables(ctx, db, []string{d.processedSchema()}); err != nil {
		return nil, fmt.Errorf("outbox: create table qmq_processed (%s): %w", d.Name, err)
	}
	insert := d.rebind(d.InsertIgnore("qmq_processed", []string{"scope", "id", "processed_at"}))
	return func(ctx context.Context, m *qmq.Message) (err error) {
		tx, err := db.BeginTx(ctx, cfg.TxOptions)
		if err != nil {
			return fmt.Errorf("outbox: process %s: begin: %w", m.ID(), err)
		}
		done := false
		defer func() {
			if !done {
				if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) {
					err = errors.Join(err, fmt.Errorf("outbox: process %s: rollback: %w", m.ID(), rerr))
				}
			}
		}()
		n, err := execCount(ctx, tx, insert, cfg.Scope, m.ID(), time.Now().UnixMilli())
		if err != nil {
			return fmt.Errorf("outbox: process %s: record the id: %w", m.ID(), err)
		}
		if n == 0 {
			return nil // processed before: the rollback leaves everything as it was
		}
		if err := h(ctx, tx, m); err != nil {
			return err
		}
		done = true
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("outbox: process %s: commit: %w", m.ID(), err)
		}
		return nil
	}, nil
}

// CleanProcessed deletes the ids recorded by Idempotent more than
// olderThan ago, in every scope, and returns how many it deleted (d nil:
// SQLite). A message whose id is deleted is processed again if it comes
// again, so olderThan must exceed the longest span over which a message
// can be delivered again: its consumer group's redelivery span (the sum of
// the backoffs up to its most deliveries: with the defaults, 32 deliveries
// from 5 s doubling to 15 min, about 6 hours), plus the time a dead
// letter may wait before an operator resends it, plus, for a message sent
// through an outbox, the time its row may wait before a resend that the
// broker no longer deduplicates (the broker down for long). A week (the
// brokers' default retention) is a sound choice.
func CleanProcessed(ctx context.Context, db *sql.DB, d *Dialect, olderThan time.Duration) (int64, error) {
	if d == nil {
		d = SQLite
	}
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: clean processed ids older than %s: must be positive", ErrConfig, olderThan)
	}
	n, err := execCount(ctx, db, d.rebind("DELETE FROM qmq_processed WHERE processed_at < ?"), time.Now().Add(-olderThan).UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("outbox: clean processed ids: %w", err)
	}
	return n, nil
}
