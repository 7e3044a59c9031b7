package outbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/testcluster"
)

// benchSenders is how many goroutines send at once in BenchmarkSend: the
// Producer batches what they send into shared Raft entries, and each
// transactional sender holds its own database transaction.
const benchSenders = 32

// BenchmarkSend compares a transactional send (an order row inserted and
// a message sent through the outbox in one transaction, then committed
// and acknowledged by the broker) on each database with a plain send of
// the same message, benchSenders at a time, against a one-node broker
// group that fsyncs every entry. A transactional send is counted once the
// broker has acknowledged it and its row is deleted.
//
//	go test -run '^$' -bench BenchmarkSend -benchtime 5000x -count 5 ./outbox/
func BenchmarkSend(b *testing.B) {
	p := benchProducer(b)
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		runSenders(b, func(int64) error {
			m := p.GenerateMessage("orders")
			m.SetInt("amount", 42)
			return p.SendMessage(ctx, m)
		})
	})
	for _, dl := range dialects {
		b.Run(dl.name, func(b *testing.B) {
			db := newTestDB(b, dl)
			ob := db.newOutbox(b, p, Config{})
			insert := db.rebind("INSERT INTO orders (id, note) VALUES (?, ?)")
			runSenders(b, func(id int64) error {
				return ob.WithTx(ctx, func(tx *Tx) error {
					if _, err := tx.ExecContext(ctx, insert, id, "order"); err != nil {
						return err
					}
					m := p.GenerateMessage("orders")
					m.SetInt("amount", 42)
					return tx.Send(ctx, m)
				})
			})
			if err := ob.Flush(ctx); err != nil { // the sends after the last commits
				b.Fatal(err)
			}
			b.StopTimer()
			if left := db.rowsLeft(b); left != 0 {
				b.Fatalf("%d rows left after the sends", left)
			}
		})
	}
}

// benchProducer returns a Producer of a one-node broker group started
// for the benchmark.
func benchProducer(b *testing.B) *qmq.Producer {
	n := testcluster.Broker(b, nil)
	p, err := qmq.NewProducer(n.ClientAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// runSenders runs send b.N times over benchSenders goroutines, each call
// with an id of its own, and reports messages per second.
func runSenders(b *testing.B, send func(id int64) error) {
	var next atomic.Int64
	errs := make(chan error, benchSenders)
	b.ResetTimer()
	start := time.Now()
	for range benchSenders {
		go func() {
			for {
				id := next.Add(1)
				if id > int64(b.N) {
					errs <- nil
					return
				}
				if err := send(id); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range benchSenders {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkWatchdogRecovery measures how fast a watchdog sends what a
// crash left: each round leaves recoveryRows committed rows unsent (as a
// process dying after its commits does) and times one Sweep that sends
// them all and deletes their rows. After a crash, a watchdog starts within
// Grace + Period of the rows' commit (plus LeaseTTL if the dead process
// held the lease); this is the time it then takes.
//
//	go test -run '^$' -bench BenchmarkWatchdogRecovery -benchtime 3x -count 5 ./outbox/
func BenchmarkWatchdogRecovery(b *testing.B) {
	const recoveryRows = 10000
	p := benchProducer(b)
	ctx := context.Background()
	for _, dl := range dialects {
		b.Run(fmt.Sprintf("%s/rows=%d", dl.name, recoveryRows), func(b *testing.B) {
			db := newTestDB(b, dl)
			down := newRecorder(nil)
			down.down.Store(true) // a process that dies after its commits sends nothing
			left := db.newOutbox(b, down, Config{})
			cfg := fastWatchdog
			cfg.Batch = 1000
			ob := db.newOutbox(b, p, cfg)
			var took time.Duration
			for range b.N {
				b.StopTimer()
				err := left.WithTx(ctx, func(tx *Tx) error {
					for range recoveryRows {
						if err := tx.Send(ctx, p.GenerateMessage("orders")); err != nil {
							return err
						}
					}
					return nil
				})
				if err == nil {
					err = left.Flush(ctx)
				}
				if err != nil {
					b.Fatal(err)
				}
				db.awaitSweepable(b, recoveryRows, cfg.Grace)
				b.StartTimer()
				start := time.Now()
				sent, err := ob.Sweep(ctx)
				took += time.Since(start)
				if err != nil || sent != recoveryRows {
					b.Fatalf("Sweep = %d, %v; want %d", sent, err, recoveryRows)
				}
			}
			b.ReportMetric(float64(b.N*recoveryRows)/took.Seconds(), "rows/s")
		})
	}
}
