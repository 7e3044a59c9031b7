package outbox

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// fastWatchdog is a watchdog config for tests: short periods, a lease
// long enough that a loaded machine does not lose it between renewals.
var fastWatchdog = Config{Period: 50 * time.Millisecond, Grace: 50 * time.Millisecond, LeaseTTL: 5 * time.Second}

// sendIn commits n new messages of subject in one transaction of ob and
// waits for the sends that follow; it returns their ids.
func sendIn(t *testing.T, ob *Outbox, p *qmq.Producer, subject string, n int) []string {
	t.Helper()
	var ids []string
	var msgs []*qmq.Message
	for range n {
		m := p.GenerateMessage(subject)
		ids = append(ids, m.ID())
		msgs = append(msgs, m)
	}
	commitMessages(t, ob, msgs)
	return ids
}

// commitMessages sends msgs in one transaction of ob and waits for the
// sends that follow its commit.
func commitMessages(t testing.TB, ob *Outbox, msgs []*qmq.Message) {
	t.Helper()
	ctx := context.Background()
	err := ob.WithTx(ctx, func(tx *Tx) error {
		for _, m := range msgs {
			if err := tx.Send(ctx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// runWatchdog runs ob's watchdog until stop is called or the test ends;
// stop returns once the watchdog has returned (and released its lease).
func runWatchdog(t *testing.T, ob *Outbox) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ob.RunWatchdog(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("watchdog: %v", err)
			}
		})
	}
	t.Cleanup(stop) // before the Outbox and its database close
	return stop
}

// downOutbox returns an outbox on pool (a pool of db's) whose every send
// fails, as if the broker were down: what is sent through it is left in
// rows for a watchdog. The producer only makes messages (nothing listens
// at its address).
func downOutbox(t *testing.T, db *testDB, pool *sql.DB) (*Outbox, *qmq.Producer) {
	t.Helper()
	writer := newRecorder(nil)
	writer.down.Store(true)
	return db.newOutboxOn(t, pool, writer, Config{}), newProducer(t, "127.0.0.1:1")
}

// Rows left behind by a process that died are resent by the watchdog with
// their ids: those whose first send was stored (its answer lost) are
// answered as duplicates, and every message is stored once.
func TestWatchdogResendsLeftRowsOnce(t *testing.T) {
	n := testcluster.Broker(t, nil)
	forEachDialect(t, func(t *testing.T, db *testDB) {
		p := newProducer(t, n.ClientAddr())
		subject := "orders." + db.name

		// The first process: its answers are lost, then it cannot send at all.
		first := newRecorder(p)
		ob1 := db.newOutboxOn(t, db.open(t), first, fastWatchdog)
		first.loseAck.Store(true)
		stored := sendIn(t, ob1, p, subject, 3)
		first.loseAck.Store(false)
		first.down.Store(true)
		unsent := sendIn(t, ob1, p, subject, 2)
		ob1.Close()

		if left := db.rowsLeft(t); left != 5 {
			t.Fatalf("%d rows left, want 5", left)
		}
		second := newRecorder(newProducer(t, n.ClientAddr()))
		ob2 := db.newOutbox(t, second, fastWatchdog)
		runWatchdog(t, ob2)
		poll.Until(t, 10*time.Second, "the watchdog to resend every row", func() bool { return db.rowsLeft(t) == 0 })

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
		got := pullAll(t, n.ClientAddr(), subject, "audit", 5)
		for _, id := range append(stored, unsent...) {
			if got[id] != 1 {
				t.Errorf("%s stored %d times, want once", id, got[id])
			}
		}
	})
}

// With the broker down, a committed message's row waits; when the broker
// is back, the watchdog sends it.
func TestBrokerDownThenBack(t *testing.T) {
	cfg := testcluster.BrokerConfig(t)
	cfg.ClientAddr = testcluster.Addr(t) // the same address after each restart
	n := testcluster.StartBroker(t, cfg)
	forEachDialect(t, func(t *testing.T, db *testDB) {
		subject := "orders." + db.name
		p := newProducer(t, n.ClientAddr(), qmq.WithSendTimeout(time.Second))
		conf := fastWatchdog
		conf.SendTimeout = time.Second
		ob := db.newOutbox(t, p, conf)
		n.Close()

		ids := sendIn(t, ob, p, subject, 2)
		if left := db.rowsLeft(t); left != 2 {
			t.Fatalf("%d rows with the broker down, want 2", left)
		}
		// A sweep fails while the broker is down; the rows stay. (It runs
		// before the watchdog, which would be sending them: a sweep skips
		// the rows being sent.)
		db.awaitSweepable(t, 2, conf.Grace)
		if _, err := ob.Sweep(context.Background()); err == nil {
			t.Error("a sweep with the broker down reported no failure")
		}
		if left := db.rowsLeft(t); left != 2 {
			t.Fatalf("%d rows after a failed sweep, want 2", left)
		}
		// The watchdog keeps trying while the broker is down, and sends
		// once it is back.
		runWatchdog(t, ob)
		n = testcluster.StartBroker(t, cfg)
		poll.Until(t, 30*time.Second, "the rows to be sent once the broker is back", func() bool { return db.rowsLeft(t) == 0 })
		got := pullAll(t, n.ClientAddr(), subject, "audit", 2)
		for _, id := range ids {
			if got[id] != 1 {
				t.Errorf("%s stored %d times, want once", id, got[id])
			}
		}
	})
}

// Two watchdogs on one database, each with its own pool: one holds the
// lease and resends, the other never does; when the holder stops, the
// other takes over.
func TestTwoWatchdogsOneLease(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		obw, p := downOutbox(t, db, db.open(t))

		a, b := newRecorder(nil), newRecorder(nil)
		cfgA, cfgB := fastWatchdog, fastWatchdog
		cfgA.Owner, cfgB.Owner = "a", "b"
		obA := db.newOutboxOn(t, db.open(t), a, cfgA)
		obB := db.newOutboxOn(t, db.open(t), b, cfgB)
		stopA, stopB := runWatchdog(t, obA), runWatchdog(t, obB)

		first := sendIn(t, obw, p, "orders", 20)
		poll.Until(t, 10*time.Second, "the first rows to be resent", func() bool { return db.rowsLeft(t) == 0 })
		holder, other := a, b
		stopHolder, obOther := stopA, obB
		if a.total() == 0 {
			holder, other = b, a
			stopHolder, obOther = stopB, obA
		}
		if _, err := obOther.Sweep(context.Background()); !errors.Is(err, ErrLeaseHeld) {
			t.Errorf("a sweep by the watchdog without the lease = %v, want ErrLeaseHeld", err)
		}
		if holder.total() != len(first) || other.total() != 0 {
			t.Fatalf("sends by the holder %d, by the other %d; want %d and 0", holder.total(), other.total(), len(first))
		}
		for _, id := range first {
			if s, _ := holder.sendsOf(id); s != 1 {
				t.Errorf("%s resent %d times, want once", id, s)
			}
		}

		// The holder stops, releasing its lease, and the other takes over.
		stopHolder()
		second := sendIn(t, obw, p, "orders", 5)
		poll.Until(t, 10*time.Second, "the other watchdog to resend", func() bool { return db.rowsLeft(t) == 0 })
		for _, id := range second {
			if s, _ := other.sendsOf(id); s != 1 {
				t.Errorf("after the holder stopped, %s resent %d times by the other, want once", id, s)
			}
			if s, _ := holder.sendsOf(id); s != 0 {
				t.Errorf("after it stopped, the holder resent %s", id)
			}
		}
		if n := db.count(t, "SELECT count(*) FROM qmq_outbox_lease"); n != 1 {
			t.Errorf("%d lease rows, want one", n)
		}
	})
}

// A lease whose holder died without releasing it is taken only once it
// has expired.
func TestLeaseExpires(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		obw, p := downOutbox(t, db, db.DB)
		sendIn(t, obw, p, "orders", 3)

		rec := newRecorder(nil)
		ob := db.newOutbox(t, rec, fastWatchdog)
		expires := time.Now().Add(time.Second)
		db.exec(t, "INSERT INTO qmq_outbox_lease (name, owner, expires_at, renewals) VALUES (?, 'dead', ?, 0)", leaseName, expires.UnixMilli())
		ctx := context.Background()
		db.awaitSweepable(t, 3, fastWatchdog.Grace)
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
		poll.Until(t, 10*time.Second, "the expired lease to be taken", func() bool {
			_, err := ob.Sweep(ctx)
			return err == nil
		})
		if rec.total() != 3 || db.rowsLeft(t) != 0 {
			t.Errorf("after the lease expired: %d resent, %d rows left; want 3 and 0", rec.total(), db.rowsLeft(t))
		}
	})
}

// freezeExpiry makes every update of the lease keep its expiry, as a
// renewal within the millisecond of the one before does: the update then
// changes nothing but the count of renewals.
var freezeExpiry = map[string][]string{
	"sqlite": {`CREATE TRIGGER freeze_expiry AFTER UPDATE OF expires_at ON qmq_outbox_lease
		BEGIN UPDATE qmq_outbox_lease SET expires_at = OLD.expires_at WHERE name = NEW.name; END`},
	"postgresql": {`CREATE FUNCTION freeze_expiry() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN NEW.expires_at := OLD.expires_at; RETURN NEW; END $$`,
		`CREATE TRIGGER freeze_expiry BEFORE UPDATE ON qmq_outbox_lease FOR EACH ROW EXECUTE FUNCTION freeze_expiry()`},
	"mysql": {`CREATE TRIGGER freeze_expiry BEFORE UPDATE ON qmq_outbox_lease FOR EACH ROW SET NEW.expires_at = OLD.expires_at`},
}

// A renewal that leaves the lease's owner and expiry as they were (within
// the same millisecond as the one before) still holds the lease: MySQL
// counts the rows an UPDATE changed, not those it matched.
func TestLeaseRenewalWithinAMillisecond(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ob := db.newOutbox(t, newRecorder(nil), fastWatchdog)
		ctx := context.Background()
		if err := ob.takeLease(ctx); err != nil {
			t.Fatal(err)
		}
		for _, q := range freezeExpiry[db.name] {
			db.exec(t, q)
		}
		var expires int64
		for i := range 3 {
			if err := ob.takeLease(ctx); err != nil {
				t.Fatalf("renewal %d with the expiry unchanged: %v", i, err)
			}
			e := int64(db.count(t, "SELECT expires_at FROM qmq_outbox_lease"))
			if i > 0 && e != expires {
				t.Fatalf("the expiry changed from %d to %d: the trigger did not hold it", expires, e)
			}
			expires = e
		}
		if n := db.count(t, "SELECT renewals FROM qmq_outbox_lease"); n != 3 {
			t.Errorf("%d renewals counted, want 3", n)
		}
	})
}

// Rows younger than the grace period are left to the send that follows
// their commit.
func TestSweepLeavesYoungRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		obw, p := downOutbox(t, db, db.DB)
		sendIn(t, obw, p, "orders", 2)
		rec := newRecorder(nil)
		ob := db.newOutbox(t, rec, Config{}) // Grace 30 s
		if n, err := ob.Sweep(context.Background()); err != nil || n != 0 || rec.total() != 0 {
			t.Errorf("a sweep of rows younger than the grace: %d sent, %v, %d asked; want none", n, err, rec.total())
		}
	})
}

// A row that cannot be decoded is logged and skipped; the rows after it
// are resent, in pages of one row.
func TestSweepSkipsBadRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, db *testDB) {
		ob0, p := downOutbox(t, db, db.DB)
		db.exec(t, "INSERT INTO qmq_outbox (id, subject, payload, deliver_at, created_at) VALUES ('bad', 'orders', ?, 0, 0)", []byte{0x00, 0xff})
		sendIn(t, ob0, p, "orders", 2)
		rec := newRecorder(nil)
		cfg := fastWatchdog
		cfg.Batch = 1 // the bad row fills a batch of its own
		ob := db.newOutbox(t, rec, cfg)
		poll.Until(t, 10*time.Second, "the good rows to be resent", func() bool {
			ob.Sweep(context.Background())
			return db.rowsLeft(t) == 1
		})
		if rec.total() != 2 {
			t.Errorf("%d sends, want the 2 good rows", rec.total())
		}
	})
}
