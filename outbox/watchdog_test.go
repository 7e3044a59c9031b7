package outbox

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/await"
	"github.com/qmqgo/qmq/internal/testcluster"
)

// fastWatchdog is a watchdog config for tests: short periods, a lease
// long enough that a loaded machine does not lose it between renewals.
var fastWatchdog = Config{Period: 50 * time.Millisecond, Grace: 50 * time.Millisecond, LeaseTTL: 5 * time.Second}

func sendIn(t *testing.T, ob *Outbox, p *qmq.Producer, subject string, n int) []string {
	t.Helper()
	var ids []string
	err := ob.WithTx(context.Background(), func(tx *Tx) error {
		for range n {
			m := p.GenerateMessage(subject)
			ids = append(ids, m.ID())
			if err := tx.Send(context.Background(), m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ids
}

// downOutbox returns an outbox on db whose every send fails, as if the
// broker were down: what is sent through it is left in rows for a
// watchdog. The producer only makes messages (nothing listens at its
// address).
func downOutbox(t *testing.T, db *sql.DB) (*Outbox, *qmq.Producer) {
	t.Helper()
	writer := newRecorder(nil)
	writer.down.Store(true)
	return newOutbox(t, db, writer, Config{}), newProducer(t, "127.0.0.1:1")
}

// Rows left behind by a process that died are resent by the watchdog with
// their ids: those whose first send was stored (its answer lost) are
// answered as duplicates, and every message is stored once.
func TestWatchdogResendsLeftRowsOnce(t *testing.T) {
	n := testcluster.Broker(t, nil)
	path := filepath.Join(t.TempDir(), "app.db")
	p := newProducer(t, n.ClientAddr())

	// The first process: its answers are lost, then it cannot send at all.
	first := newRecorder(p)
	ob1 := newOutbox(t, openDB(t, path), first, fastWatchdog)
	first.loseAck.Store(true)
	stored := sendIn(t, ob1, p, "orders", 3)
	first.loseAck.Store(false)
	first.down.Store(true)
	unsent := sendIn(t, ob1, p, "orders", 2)
	ob1.Close()

	db := openDB(t, path)
	if left := rowsLeft(t, db); left != 5 {
		t.Fatalf("%d rows left, want 5", left)
	}
	second := newRecorder(newProducer(t, n.ClientAddr()))
	ob2 := newOutbox(t, db, second, fastWatchdog)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ob2.RunWatchdog(ctx)
	await.True(t, 10*time.Second, "the watchdog to resend every row", func() bool { return rowsLeft(t, db) == 0 })

	for _, id := range stored {
		if s, d := second.sendsOf(id); s != 1 || d != 1 {
			t.Errorf("stored %s: resent %d times, %d answered as duplicates; want 1 and 1", id, s, d)
		}
	}
	for _, id := range unsent {
		if s, d := second.sendsOf(id); s != 1 || d != 0 {
			t.Errorf("unsent %s: resent %d times, %d answered as duplicates; want 1 and 0", id, s, d)
		}
	}
	got := pullAll(t, n.ClientAddr(), "orders", "audit", 5)
	for _, id := range append(stored, unsent...) {
		if got[id] != 1 {
			t.Errorf("%s stored %d times, want once", id, got[id])
		}
	}
}

// With the broker down, a committed message's row waits; when the broker
// is back, the watchdog sends it.
func TestBrokerDownThenBack(t *testing.T) {
	cfg := testcluster.BrokerConfig(t)
	cfg.ClientAddr = testcluster.Addr(t) // the same address after the restart
	n := testcluster.StartBroker(t, cfg)
	db := tempDB(t)
	p := newProducer(t, n.ClientAddr(), qmq.WithSendTimeout(time.Second))
	conf := fastWatchdog
	conf.SendTimeout = time.Second
	ob := newOutbox(t, db, p, conf)
	n.Close()

	ids := sendIn(t, ob, p, "orders", 2)
	if left := rowsLeft(t, db); left != 2 {
		t.Fatalf("%d rows with the broker down, want 2", left)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A sweep with the broker down fails; the rows stay. (Before the
	// watchdog runs: a sweep of its own would claim the rows first.)
	if _, err := ob.Sweep(ctx); err == nil {
		t.Error("a sweep with the broker down reported no failure")
	}
	if left := rowsLeft(t, db); left != 2 {
		t.Fatalf("%d rows after a failed sweep, want 2", left)
	}
	go ob.RunWatchdog(ctx) // keeps trying while the broker is down
	n2 := testcluster.StartBroker(t, cfg)
	await.True(t, 30*time.Second, "the rows to be sent once the broker is back", func() bool { return rowsLeft(t, db) == 0 })
	got := pullAll(t, n2.ClientAddr(), "orders", "audit", 2)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("%s stored %d times, want once", id, got[id])
		}
	}
}

// Two watchdogs on one database: one holds the lease and resends, the
// other never does; when the holder stops, the other takes over.
func TestTwoWatchdogsOneLease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	obw, p := downOutbox(t, openDB(t, path))

	a, b := newRecorder(nil), newRecorder(nil)
	cfgA, cfgB := fastWatchdog, fastWatchdog
	cfgA.Owner, cfgB.Owner = "a", "b"
	obA := newOutbox(t, openDB(t, path), a, cfgA)
	obB := newOutbox(t, openDB(t, path), b, cfgB)
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait() // after both are stopped (defers run last first)
	defer stopA()
	defer stopB()
	wg.Go(func() { obA.RunWatchdog(ctxA) })
	wg.Go(func() { obB.RunWatchdog(ctxB) })

	db := openDB(t, path)
	first := sendIn(t, obw, p, "orders", 20)
	await.True(t, 10*time.Second, "the first rows to be resent", func() bool { return rowsLeft(t, db) == 0 })
	holder, other := a, b
	stopHolder := stopA
	if a.total() == 0 {
		holder, other = b, a
		stopHolder = stopB
	}
	if holder.total() != len(first) || other.total() != 0 {
		t.Fatalf("sends by the holder %d, by the other %d; want %d and 0", holder.total(), other.total(), len(first))
	}
	for _, id := range first {
		if s, _ := holder.sendsOf(id); s != 1 {
			t.Errorf("%s resent %d times, want once", id, s)
		}
	}

	// The holder stops: it releases its lease, and the other takes over.
	stopHolder()
	second := sendIn(t, obw, p, "orders", 5)
	await.True(t, 10*time.Second, "the other watchdog to resend", func() bool { return rowsLeft(t, db) == 0 })
	for _, id := range second {
		if s, _ := other.sendsOf(id); s != 1 {
			t.Errorf("after the holder stopped, %s resent %d times by the other, want once", id, s)
		}
		if s, _ := holder.sendsOf(id); s != 0 {
			t.Errorf("after it stopped, the holder resent %s", id)
		}
	}
}

// A lease whose holder died without releasing it is taken only once it
// has expired.
func TestLeaseExpires(t *testing.T) {
	db := tempDB(t)
	obw, p := downOutbox(t, db)
	sendIn(t, obw, p, "orders", 3)

	rec := newRecorder(nil)
	ob := newOutbox(t, db, rec, fastWatchdog)
	expires := time.Now().Add(time.Second)
	if _, err := db.Exec("INSERT INTO qmq_outbox_lease (name, owner, expires_at, renewals) VALUES (?, 'dead', ?, 0)", leaseName, expires.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	await.True(t, 10*time.Second, "the rows to be old enough", func() bool {
		return count(t, db, "SELECT count(*) FROM qmq_outbox WHERE created_at <= ?", time.Now().Add(-fastWatchdog.Grace).UnixMilli()) == 3
	})
	// Sweeps through the lease's life, each refused: the time to the expiry
	// is what is under test, so it is slept through, not awaited.
	for time.Now().Before(expires.Add(-100 * time.Millisecond)) {
		if _, err := ob.Sweep(ctx); !errors.Is(err, ErrLeaseHeld) {
			t.Fatalf("a sweep while another owner's lease is live = %v, want ErrLeaseHeld", err)
		}
		if rec.total() != 0 {
			t.Fatal("rows resent while another owner's lease is live")
		}
		time.Sleep(20 * time.Millisecond)
	}
	await.True(t, 10*time.Second, "the expired lease to be taken", func() bool {
		_, err := ob.Sweep(ctx)
		return err == nil
	})
	if rec.total() != 3 || rowsLeft(t, db) != 0 {
		t.Errorf("after the lease expired: %d resent, %d rows left; want 3 and 0", rec.total(), rowsLeft(t, db))
	}
}

// Rows younger than the grace period are left to the send that follows
// their commit.
func TestSweepLeavesYoungRows(t *testing.T) {
	db := tempDB(t)
	obw, p := downOutbox(t, db)
	sendIn(t, obw, p, "orders", 2)
	rec := newRecorder(nil)
	ob := newOutbox(t, db, rec, Config{}) // Grace 30 s
	if n, err := ob.Sweep(context.Background()); err != nil || n != 0 || rec.total() != 0 {
		t.Errorf("a sweep of rows younger than the grace: %d sent, %v, %d asked; want none", n, err, rec.total())
	}
}

// A row that cannot be decoded is logged and skipped; the rows after it
// are resent.
func TestSweepSkipsBadRows(t *testing.T) {
	db := tempDB(t)
	ob0, p := downOutbox(t, db)
	if _, err := db.Exec("INSERT INTO qmq_outbox (id, subject, payload, deliver_at, created_at) VALUES ('bad', 'orders', x'00ff', 0, 0)"); err != nil {
		t.Fatal(err)
	}
	sendIn(t, ob0, p, "orders", 2)
	rec := newRecorder(nil)
	cfg := fastWatchdog
	cfg.Batch = 1 // the bad row fills a batch of its own
	ob := newOutbox(t, db, rec, cfg)
	await.True(t, 10*time.Second, "the good rows to be resent", func() bool {
		ob.Sweep(context.Background())
		return rowsLeft(t, db) == 1
	})
	if rec.total() != 2 {
		t.Errorf("%d sends, want the 2 good rows", rec.total())
	}
}
