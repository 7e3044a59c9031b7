// Command orderapp is the application of the transactional outbox's
// end-to-end test (test/outbox_faults_test.go): a program the test runs
// as several processes and SIGKILLs at random.
//
//	orderapp produce --servers ADDRS --dsn DSN --name NAME
//	orderapp consume --servers ADDRS --dsn DSN --name NAME --group GROUP
//
// produce makes orders: in a loop, a transaction on the producer's
// PostgreSQL database inserts an order row and sends an "orders" message
// carrying the order's id through an outbox.Outbox, then commits, or
// rolls back about one time in ten. Its watchdog (outbox.RunWatchdog)
// resends what a killed process left. SIGTERM stops the orders and leaves
// the watchdog running; SIGINT ends the process.
//
// consume subscribes to "orders" in a consumer group and applies each
// message with outbox.Idempotent on the consumer's PostgreSQL database:
// the effect is a row in the table effects, which has no unique key, so
// an effect applied twice shows as two rows. SIGTERM or SIGINT closes the
// subscription and ends the process.
//
// Both tell the test what happened as lines on standard output, each
// written in one write (atomic on a pipe), "EVENT ORDER [MESSAGE-ID]":
//
//	ready NAME                 set up; the orders (or deliveries) begin
//	commit ORDER               the order's transaction committed
//	rollback ORDER             the order's transaction was rolled back
//	uncertain ORDER            the commit failed: committed or not, the database says
//	resend ORDER ID            a watchdog sends a row again (this process sent it before, or another process wrote it)
//	duplicate ORDER ID         a send was answered as a duplicate: the broker had the id
//	stopped NAME               SIGTERM: no more orders
//	applied ORDER ID N         the effect of delivery N was committed
//	absorbed ORDER ID N        delivery N came again after the effect: acknowledged, nothing applied
//	nack ORDER ID N            the handler failed: the message comes again
//
// The tables (orders, effects) are the test's to create. Logs go to
// standard error.
package main

import (
	"fmt"
	"os"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// subject is the subject of the orders' messages.
const subject = "orders"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: orderapp produce|consume [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "produce":
		err = produce(os.Args[2:])
	case "consume":
		err = consume(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (produce or consume)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orderapp:", err)
		os.Exit(1)
	}
}

// emit writes one event line to standard output in a single write.
func emit(event string, fields ...string) {
	os.Stdout.WriteString(event + " " + strings.Join(fields, " ") + "\n")
}
