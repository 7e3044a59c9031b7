package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/outbox"
)

// orderTimeout bounds one order's transaction.
const orderTimeout = 10 * time.Second

// produce runs the order loop and the outbox's watchdog (see the package
// documentation).
func produce(args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	servers := fs.String("servers", "", "broker `HOST:PORT[,…]`")
	dsn := fs.String("dsn", "", "the producer's PostgreSQL `DSN` (driver pgx)")
	name := fs.String("name", "app", "the process's `NAME`: its order ids start with it")
	every := fs.Duration("every", 20*time.Millisecond, "make an order every `DUR`")
	rollbackOneIn := fs.Int("rollback-one-in", 10, "roll back one order in `N`, at random")
	period := fs.Duration("period", time.Second, "the watchdog's period; its grace is the same, its lease 3 periods")
	sendTimeout := fs.Duration("send-timeout", 10*time.Second, "bound one send of a row, retries included")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *servers == "" || *dsn == "" || *every <= 0 || *rollbackOneIn < 1 {
		return fmt.Errorf("produce: --servers and --dsn are required, --every and --rollback-one-in positive")
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "orderapp." + *name, Output: os.Stderr, Level: hclog.Info})

	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := qmq.NewProducer(*servers)
	if err != nil {
		return err
	}
	defer p.Close()
	// Order ids are unique across the process's lives: its name, its
	// start time, a sequence number.
	prefix := *name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ob, err := outbox.New(db, newSender(p, prefix), outbox.Config{Dialect: outbox.PostgreSQL, Period: *period,
		SendTimeout: *sendTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer ob.Close()

	ordering, stopOrders := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stopOrders()
	running, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	watchdog := make(chan error, 1)
	go func() { watchdog <- ob.RunWatchdog(running) }()
	emit("ready", *name)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	tick := time.NewTicker(*every)
	defer tick.Stop()
orders:
	for seq := 1; ; seq++ {
		select {
		case <-ordering.Done():
			break orders
		case <-tick.C:
		}
		id := prefix + "-" + strconv.Itoa(seq)
		if err := order(ob, p, id, *name, rng.IntN(*rollbackOneIn) == 0); err != nil {
			log.Warn("order failed", "order", id, "error", err)
		}
	}
	flush, cancel := context.WithTimeout(context.Background(), *sendTimeout)
	ob.Flush(flush)
	cancel()
	emit("stopped", *name)
	select {
	case <-running.Done():
		return <-watchdog
	case err := <-watchdog:
		return fmt.Errorf("produce: the watchdog stopped: %w", err)
	}
}

// order makes one order in a transaction: the order's row and its message
// through the outbox, then a commit, or a rollback if rollback is set.
func order(ob *outbox.Outbox, p *qmq.Producer, id, app string, rollback bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), orderTimeout)
	defer cancel()
	tx, err := ob.Begin(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, app, created_at) VALUES ($1, $2, $3)",
		id, app, time.Now().UnixMilli()); err != nil {
		tx.Rollback()
		return err
	}
	m := p.GenerateMessage(subject)
	m.SetString("order", id)
	m.SetBody([]byte("order " + id))
	if err := tx.Send(ctx, m); err != nil {
		tx.Rollback()
		return err
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			return err
		}
		emit("rollback", id)
		return nil
	}
	if err := tx.Commit(); err != nil {
		emit("uncertain", id)
		return err
	}
	emit("commit", id)
	return nil
}
