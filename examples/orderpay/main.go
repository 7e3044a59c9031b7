// Command orderpay shows the transactional outbox and the idempotent
// consumer (package outbox) at work, on SQLite, against a running queue.
//
// An order service writes each order's row and sends orders.created in the
// same database transaction (outbox.Tx.Send): the message is sent if and
// only if the order commits, and it is sent right after the commit. One
// order is declined after its message was written: its transaction rolls
// back, and neither the order nor its message exists. The last order is
// committed by a process that "dies" before it can send (the transaction
// is committed outside the outbox, as a crash right after the commit
// would leave it): its message waits in the table qmq_outbox until the
// watchdog (Outbox.RunWatchdog) sends it.
//
// A payment service consumes orders.created as the consumer group
// "payments", through the idempotent consumer (outbox.Idempotent): each
// payment row is written in the same transaction that records the
// message's id. The acknowledgement of the first order's payment is lost
// (the handler fails after its transaction committed), so its message
// comes again: the order is still paid once.
//
// The program prints what happens and exits once every order is paid,
// checking that each was paid exactly once; it fails after --timeout.
// With `make run` going in another terminal:
//
//	go run ./examples/orderpay
//	go run ./examples/orderpay --orders 20 --db /tmp/shop.db
//
// Both services share one database file here, for brevity; in production
// each would have its own database, and the tables of the outbox (the
// order service's) and of the idempotent consumer (the payment service's)
// would live in each.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq"
)

// maxOrders bounds --orders: each order is a row, a message and a payment.
const maxOrders = 10_000

// errUsage means a flag is out of its range.
var errUsage = errors.New("orderpay: invalid flag")

// config is what run does; main fills it from the flags.
type config struct {
	// server is the queue: any broker or metaserver address (a
	// comma-separated list). Default qmq.DefaultServer, where `make run`
	// listens.
	server string
	// db is the SQLite file both services use, created if missing.
	// Default orderpay.db in the system's temporary directory.
	db string
	// orders is how many orders to place and pay, 1 to maxOrders (the
	// declined order comes on top). Default 5.
	orders int
	// timeout bounds the whole run. Default 1 minute.
	timeout time.Duration
	// period is the watchdog's period, and so its grace (how old a row must
	// be before it is resent) and a third of its lease. Short here, so that
	// the order left to the watchdog is paid within seconds; the default
	// of a real service is 30 s. Default 1 s.
	period time.Duration
	// logger receives the outbox's warnings (a send that failed, a row
	// that cannot be sent). Default warnings to standard error.
	logger hclog.Logger
}

// check reports a setting out of its range.
func (c config) check() error {
	switch {
	case c.server == "":
		return fmt.Errorf("%w: --server is empty", errUsage)
	case c.db == "":
		return fmt.Errorf("%w: --db is empty", errUsage)
	case c.orders < 1 || c.orders > maxOrders:
		return fmt.Errorf("%w: --orders %d (1..%d)", errUsage, c.orders, maxOrders)
	case c.timeout <= 0:
		return fmt.Errorf("%w: --timeout %s must be positive", errUsage, c.timeout)
	case c.period <= 0:
		return fmt.Errorf("%w: watchdog period %s must be positive", errUsage, c.period)
	case c.logger == nil:
		return fmt.Errorf("%w: no logger", errUsage)
	}
	return nil
}

func main() {
	cfg := config{period: time.Second, logger: hclog.New(&hclog.LoggerOptions{Name: "outbox", Level: hclog.Warn, Output: os.Stderr})}
	flag.StringVar(&cfg.server, "server", qmq.DefaultServer, "the queue: any broker or metaserver `HOST:PORT` (make run listens here)")
	flag.StringVar(&cfg.db, "db", filepath.Join(os.TempDir(), "orderpay.db"), "SQLite database `file` for both services, created if missing")
	flag.IntVar(&cfg.orders, "orders", 5, fmt.Sprintf("how many orders to place and pay (1..%d)", maxOrders))
	flag.DurationVar(&cfg.timeout, "timeout", time.Minute, "give up if the orders are not all paid by then")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: orderpay [flags]\n\n"+
			"Places orders with the transactional outbox and pays them with the idempotent\n"+
			"consumer, against a running queue (make run). Flags:\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, cfg, newPrinter(os.Stdout)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
