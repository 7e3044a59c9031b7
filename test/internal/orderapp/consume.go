package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/outbox"
)

// consume applies the orders' messages once each (see the package
// documentation).
func consume(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	servers := fs.String("servers", "", "broker `HOST:PORT[,…]`")
	dsn := fs.String("dsn", "", "the consumer's PostgreSQL `DSN` (driver pgx)")
	name := fs.String("name", "consumer", "the consumer's `NAME` in its group: a restart under it takes over what was unacknowledged")
	group := fs.String("group", "fulfilment", "the consumer `GROUP`, and the scope of the processed ids")
	workers := fs.Int("workers", 4, "handlers at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *servers == "" || *dsn == "" {
		return fmt.Errorf("consume: --servers and --dsn are required")
	}
	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return err
	}
	defer db.Close()

	h, err := outbox.Idempotent(db, func(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
		*ctx.Value(ranKey{}).(*bool) = true
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (order_id, message_id, consumer, deliveries, applied_at) VALUES ($1, $2, $3, $4, $5)",
			m.String("order"), m.ID(), *name, m.Deliveries(), time.Now().UnixMilli())
		return err
	}, outbox.IdempotentConfig{Dialect: outbox.PostgreSQL, Scope: *group})
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, m *qmq.Message) error {
		ran := false
		err := h(context.WithValue(ctx, ranKey{}, &ran), m)
		event := "absorbed"
		switch {
		case err != nil:
			event = "nack"
		case ran:
			event = "applied"
		}
		emit(event, m.String("order"), m.ID(), strconv.Itoa(m.Deliveries()))
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("consumer", *name)
	sub, err := qmq.Subscribe(*servers, subject, *group, handler, qmq.WithConsumerName(*name), qmq.StartAt(qmq.Earliest),
		qmq.WithPullWait(500*time.Millisecond), qmq.WithWorkers(*workers), qmq.WithLogger(log))
	if err != nil {
		return err
	}
	emit("ready", *name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return sub.Close()
}

// ranKey marks, in a handler's context, whether the effect ran for this
// delivery.
type ranKey struct{}
