package test

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/testdb"
)

// The outbox's end-to-end run is configured from the environment:
//
//	QMQ_OUTBOX_FAULTS_DURATION  how long faults are applied (default 45s)
//	QMQ_OUTBOX_FAULTS_SEED      the fault schedule's seed (default: from the clock, printed)
func outboxFaultSettings(t *testing.T) (time.Duration, uint64) {
	return runSettings(t, "QMQ_OUTBOX_FAULTS", 45*time.Second)
}

// TestOutboxEndToEndWithFaults runs the transactional outbox and the
// idempotent consumer as real processes (test/internal/orderapp) against
// a three-node broker group and two PostgreSQL databases: two order
// applications each commit an order row and its "orders" message in one
// transaction (a tenth rolled back), with their outbox watchdogs resending
// what is left every second; two consumer processes of one group apply
// each message once, an effect row per order in a table without a unique
// key. Meanwhile the applications and the consumers are SIGKILLed at
// random and restarted, and the broker group's leader is SIGKILLed every
// 6–10 s and restarted once a new leader is elected. Then the faults stop,
// the applications stop making orders, the watchdogs empty the outbox,
// and the run checks that every committed order has exactly one message
// in the log (read by a new consumer group from the earliest message) and
// exactly one effect, and that nothing of a rolled-back or unfinished
// transaction appears in either.
func TestOutboxEndToEndWithFaults(t *testing.T) {
	d, seed := outboxFaultSettings(t)
	t.Logf("outbox faults: seed %d, duration %s", seed, d)
	testStart := time.Now()
	producerDB, producerDSN := openPostgres(t, "CREATE TABLE orders (id TEXT PRIMARY KEY, app TEXT NOT NULL, created_at BIGINT NOT NULL)")
	// No unique key on order_id: an effect applied twice is two rows.
	consumerDB, consumerDSN := openPostgres(t, "CREATE TABLE effects (order_id TEXT NOT NULL, message_id TEXT NOT NULL, "+
		"consumer TEXT NOT NULL, deliveries INTEGER NOT NULL, applied_at BIGINT NOT NULL)")

	// Consumer sessions time out after 3 s, so that what a killed
	// consumer held comes back soon even to another consumer.
	c := NewCluster(t, "g1", "--election-timeout", "500ms", "--session-timeout", "3s")
	c.Form("", "n1", "n2", "n3")
	servers := c.ClientAddrs()
	orderapp := AppBinary(t, "./test/internal/orderapp")

	ev := NewOrderEvents()
	dir := t.TempDir()
	var apps, consumers []*AppProc
	for _, name := range []string{"a1", "a2"} {
		apps = append(apps, NewAppProc(t, name, dir, orderapp, []string{"produce", "--servers", servers, "--dsn", producerDSN,
			"--name", name, "--every", "20ms", "--period", "1s"}, ev.Line))
	}
	for _, name := range []string{"c1", "c2"} {
		consumers = append(consumers, NewAppProc(t, name, dir, orderapp, []string{"consume", "--servers", servers, "--dsn", consumerDSN,
			"--name", name, "--group", "fulfilment"}, ev.Line))
	}
	procs := append(append([]*AppProc(nil), apps...), consumers...)
	exits := func() error {
		for _, p := range procs {
			if err := p.UnexpectedExit(); err != nil {
				return err
			}
		}
		return nil
	}
	// One at a time at first, so that the tables each creates (the
	// outbox's, the processed ids') are created by one process.
	for _, p := range procs {
		p.Start()
		c.WaitFor(30*time.Second, p.Name+" is ready", func() error {
			if err := exits(); err != nil {
				t.Fatal(err)
			}
			if ev.ReadyLives(p.Name) == 0 {
				return fmt.Errorf("%s: not ready", p.Name)
			}
			return nil
		})
	}

	// Faults: a process killed and restarted every 0.2–1 s, the leader
	// every 6–10 s.
	ch := NewChaos(t, seed, nil, c)
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	kills := map[string]int{}
	faultStart := time.Now()
	nextLeaderKill := faultStart.Add(5 * time.Second)
	for deadline := faultStart.Add(d); time.Now().Before(deadline); {
		if err := exits(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(nextLeaderKill) {
			ch.current = "kill-leader"
			ch.record("kill-leader", c.Group+": "+ch.killLeader(c))
			ch.heal(c)
			kills["leader"]++
			nextLeaderKill = time.Now().Add(time.Duration(6000+rng.IntN(4000)) * time.Millisecond)
			continue
		}
		sleepFor(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		p := procs[rng.IntN(len(procs))]
		p.Kill()
		p.Start()
		kind := "app"
		if strings.HasPrefix(p.Name, "c") {
			kind = "consumer"
		}
		kills[kind]++
	}
	committed, rolledBack := ev.Count()
	t.Logf("faults over after %s: %d app kills, %d consumer kills, %d leader kills; %d commits and %d rollbacks reported so far",
		time.Since(faultStart).Round(time.Millisecond), kills["app"], kills["consumer"], kills["leader"], committed, rolledBack)

	// The applications stop making orders; their watchdogs go on. A
	// process restarted by the last fault is let get ready first: SIGTERM
	// ends one that has not set up its handling yet.
	drainStart := time.Now()
	c.WaitFor(30*time.Second, "every process is ready after its last restart", func() error {
		if err := exits(); err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if ev.ReadyLives(p.Name) < p.Starts() {
				return fmt.Errorf("%s: not ready", p.Name)
			}
		}
		return nil
	})
	for _, a := range apps {
		a.Signal(syscall.SIGTERM)
	}
	c.WaitFor(30*time.Second, "the applications stop making orders", func() error {
		if err := exits(); err != nil {
			t.Fatal(err)
		}
		for _, a := range apps {
			if !ev.HasStopped(a.Name) {
				return fmt.Errorf("%s makes orders still", a.Name)
			}
		}
		return nil
	})
	c.WaitFor(60*time.Second, "the watchdogs empty the outbox", func() error {
		if err := exits(); err != nil {
			t.Fatal(err)
		}
		n, err := countRows(producerDB, "SELECT count(*) FROM qmq_outbox")
		if err == nil && n > 0 {
			err = fmt.Errorf("%d rows in the outbox", n)
		}
		return err
	})
	outboxEmpty := time.Since(drainStart)
	orders, err := countRows(producerDB, "SELECT count(*) FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	c.WaitFor(60*time.Second, "the consumers apply every committed order", func() error {
		if err := exits(); err != nil {
			t.Fatal(err)
		}
		n, err := countRows(consumerDB, "SELECT count(DISTINCT order_id) FROM effects")
		if err == nil && n < orders {
			err = fmt.Errorf("%d of %d orders applied", n, orders)
		}
		return err
	})
	allApplied := time.Since(drainStart)
	for _, p := range consumers {
		p.Stop(syscall.SIGTERM, 40*time.Second)
	}
	for _, a := range apps {
		a.Stop(syscall.SIGINT, 40*time.Second)
	}

	check := &orderCheck{
		committed: map[string]bool{},
		reported:  ev,
		effects:   queryIDs(t, consumerDB, "SELECT order_id, count(*) FROM effects GROUP BY order_id"),
	}
	for id := range queryIDs(t, producerDB, "SELECT id, 1 FROM orders") {
		check.committed[id] = true
	}
	readStart := time.Now()
	read := readLog(t, servers, "orders", "audit", check.committed, 60*time.Second)
	check.log = read.orders
	check.run()

	stored, effects := 0, 0
	for _, n := range check.log {
		stored += n
	}
	for _, n := range check.effects {
		effects += n
	}
	t.Logf("FIGURES: %d orders committed, %d rolled back; %d app kills, %d consumer kills, %d leader kills; %s; "+
		"%d messages in the log, %d effects; %d orders with exactly one of each",
		len(check.committed), len(ev.RolledBack), kills["app"], kills["consumer"], kills["leader"], ev.Summary(),
		stored, effects, check.exactlyOne)
	t.Logf("FIGURES: faults %s; outbox empty %s after the orders stopped, every order applied after %s; log read in %s "+
		"(%d deliveries again to the reading group, not counted); %s; total %s",
		d, outboxEmpty.Round(time.Millisecond), allApplied.Round(time.Millisecond), time.Since(readStart).Round(time.Millisecond),
		read.redelivered, ch.Summary(), time.Since(testStart).Round(time.Millisecond))
	if len(read.foreign) > 0 {
		t.Errorf("%d messages in the log without an order id, e.g. %v", len(read.foreign), read.foreign[:min(len(read.foreign), 5)])
	}
	if len(ev.Unknown) > 0 {
		t.Errorf("%d lines from the applications that are not events, e.g. %q", len(ev.Unknown), ev.Unknown[:min(len(ev.Unknown), 5)])
	}
	for _, f := range check.failures {
		t.Error(f)
	}
	if len(check.committed) == 0 || kills["app"] == 0 || kills["consumer"] == 0 || kills["leader"] == 0 {
		t.Errorf("the run proves little: %d orders committed, %d app kills, %d consumer kills, %d leader kills",
			len(check.committed), kills["app"], kills["consumer"], kills["leader"])
	}
}

// openPostgres creates a database of the test's own on the test binary's
// PostgreSQL server, runs the statements in it, and returns it open with
// its DSN (driver pgx).
func openPostgres(t *testing.T, statements ...string) (*sql.DB, string) {
	t.Helper()
	dsn := testdb.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, s := range statements {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	return db, dsn
}
