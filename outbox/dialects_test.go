package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "modernc.org/sqlite"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
	"github.com/qmqgo/qmq/test/testdb"
)

// TestMain runs the tests through testdb, which stops the PostgreSQL and
// MariaDB servers they started.
func TestMain(m *testing.M) { os.Exit(testdb.Run(m)) }

// A dialect is a database the outbox runs on, as the tests reach it.
type dialect struct {
	name   string // the subtest's name, Dialect.Name
	d      *Dialect
	driver string                    // the database/sql driver
	dsn    func(t testing.TB) string // the DSN of a fresh database of the test's
}

var (
	sqliteDialect   = dialect{"sqlite", SQLite, "sqlite", sqliteDSN}
	postgresDialect = dialect{"postgresql", PostgreSQL, "pgx", func(t testing.TB) string { return testdb.Postgres(t) }}
	mysqlDialect    = dialect{"mysql", MySQL, "mysql", mariaDBDSN}
)

// dialects are the databases every test of the outbox's SQL runs on.
var dialects = []dialect{sqliteDialect, postgresDialect, mysqlDialect}

// sqliteDSN is a new database file of the test's, opened with a busy
// timeout as the package documentation asks.
func sqliteDSN(t testing.TB) string {
	return "file:" + filepath.Join(t.TempDir(), "app.db") + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
}

// mariaDBDSN is a new MariaDB database of the test's, reached with the
// driver's default of counting changed rows, not matched ones
// (clientFoundRows off): the outbox must not depend on a DSN flag.
func mariaDBDSN(t testing.TB) string {
	cfg, err := mysql.ParseDSN(testdb.MariaDB(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientFoundRows = false
	return cfg.FormatDSN()
}

// forEachDialect runs body as a subtest on a fresh database of each
// dialect, named after it.
func forEachDialect(t *testing.T, body func(t *testing.T, db *testDB)) {
	t.Helper()
	for _, dl := range dialects {
		t.Run(dl.name, func(t *testing.T) { body(t, newTestDB(t, dl)) })
	}
}

// testDB is a fresh database of one dialect, holding the tests' own
// tables: orders, and totals with order 1's total at 0.
type testDB struct {
	*sql.DB
	dialect
	dsnOf string // the DSN that reaches it, for another pool or process
}

// sqliteDB is a fresh SQLite database, for the tests of what does not
// depend on the database (Go logic: bounds, configs, decoding).
func sqliteDB(t testing.TB) *testDB { return newTestDB(t, sqliteDialect) }

func newTestDB(t testing.TB, dl dialect) *testDB {
	t.Helper()
	db := &testDB{dialect: dl, dsnOf: dl.dsn(t)}
	db.DB = db.open(t)
	db.exec(t, "CREATE TABLE orders (id INTEGER PRIMARY KEY, note VARCHAR(200))")
	db.exec(t, "CREATE TABLE totals (id INTEGER PRIMARY KEY, total BIGINT NOT NULL)")
	db.exec(t, "INSERT INTO totals (id, total) VALUES (1, 0)")
	return db
}

// open opens another pool on the database, closed when the test ends.
func (db *testDB) open(t testing.TB) *sql.DB {
	t.Helper()
	p, err := sql.Open(db.driver, db.dsnOf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// rebind turns the '?' of a test's own query into the dialect's
// placeholders.
func (db *testDB) rebind(q string) string { return db.d.rebind(q) }

func (db *testDB) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(db.rebind(q), args...); err != nil {
		t.Fatalf("%s: %s: %v", db.name, q, err)
	}
}

// count runs a query that returns one integer.
func (db *testDB) count(t testing.TB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.rebind(q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", db.name, q, err)
	}
	return n
}

func (db *testDB) rowsLeft(t testing.TB) int { return db.count(t, "SELECT count(*) FROM qmq_outbox") }

// awaitSweepable waits until the outbox's n rows are older than grace, so
// that a watchdog with that grace resends them. (Rewriting their
// created_at would rewrite large rows whole.)
func (db *testDB) awaitSweepable(t testing.TB, n int, grace time.Duration) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("%d rows older than %s", n, grace), func() bool {
		return db.count(t, "SELECT count(*) FROM qmq_outbox WHERE created_at <= ?", time.Now().Add(-grace).UnixMilli()) == n
	})
}

// newOutbox returns an Outbox of the database's dialect on its pool,
// closed when the test ends.
func (db *testDB) newOutbox(t testing.TB, s Sender, cfg Config) *Outbox {
	return db.newOutboxOn(t, db.DB, s, cfg)
}

// newOutboxOn is newOutbox on another pool of the database.
func (db *testDB) newOutboxOn(t testing.TB, pool *sql.DB, s Sender, cfg Config) *Outbox {
	t.Helper()
	cfg.Dialect = db.d
	if cfg.Logger == nil {
		cfg.Logger = testcluster.Logger(t)
	}
	ob, err := New(pool, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// idempotent wraps h with Idempotent in the database's dialect.
func (db *testDB) idempotent(t *testing.T, h func(context.Context, *sql.Tx, *qmq.Message) error, cfg IdempotentConfig) qmq.Handler {
	t.Helper()
	cfg.Dialect = db.d
	handler, err := Idempotent(db.DB, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

// addToOrder is a handler whose effect shows how often it was applied: it
// adds the message's "amount" to order 1's total.
func (db *testDB) addToOrder(ctx context.Context, tx *sql.Tx, m *qmq.Message) error {
	amount, err := m.Int("amount")
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, db.rebind("UPDATE totals SET total = total + ? WHERE id = 1"), amount)
	return err
}

// wantTotal checks that order 1's total is want after what happened.
func (db *testDB) wantTotal(t *testing.T, want int, after string) {
	t.Helper()
	if got := db.count(t, "SELECT total FROM totals WHERE id = 1"); got != want {
		t.Errorf("total %d after %s, want %d", got, after, want)
	}
}
