package outbox

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/internal/wait"
)

// Dialect holds every piece of SQL in which the databases the outbox
// runs on differ; everything else is plain SQL that each of them takes.
// Times are stored as Unix milliseconds in an integer column in every
// dialect, so that no comparison depends on a database's time zone or
// clock.
type Dialect struct {
	// Name names the dialect in errors and logs.
	Name string
	// KeyType is the column type of a text primary key: a message id (at
	// most 128 bytes), a lease's name, a consumer's scope.
	KeyType string
	// BlobType is the column type of an encoded message (at most
	// qmq.MaxMessageSize bytes).
	BlobType string
	// TimeType is the column type of a time in Unix milliseconds.
	TimeType string
	// Placeholder returns the bind parameter numbered n (from 1).
	Placeholder func(n int) string
	// IndexInTable declares qmq_outbox's index in its CREATE TABLE, for a
	// database without CREATE INDEX IF NOT EXISTS (MySQL); otherwise the
	// index is created by its own statement.
	IndexInTable bool
	// InsertIgnore returns "INSERT ... VALUES (...)" that inserts nothing,
	// without an error and without spoiling the transaction, when a row
	// with the same primary key exists; the rows affected tell which.
	InsertIgnore func(table string, cols []string) string
}

// SQLite is the dialect of SQLite 3.24 or later (modernc.org/sqlite,
// mattn/go-sqlite3).
var SQLite = &Dialect{
	Name:        "sqlite",
	KeyType:     "TEXT",
	BlobType:    "BLOB",
	TimeType:    "INTEGER",
	Placeholder: func(int) string { return "?" },
	InsertIgnore: func(table string, cols []string) string {
		return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " + inList(len(cols)) + " ON CONFLICT DO NOTHING"
	},
}

// PostgreSQL is the dialect of PostgreSQL 9.5 or later, through
// database/sql (github.com/jackc/pgx/v5/stdlib, lib/pq).
var PostgreSQL = &Dialect{
	Name:        "postgresql",
	KeyType:     "TEXT",
	BlobType:    "BYTEA",
	TimeType:    "BIGINT",
	Placeholder: func(n int) string { return "$" + strconv.Itoa(n) },
	InsertIgnore: func(table string, cols []string) string {
		return "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " + inList(len(cols)) + " ON CONFLICT DO NOTHING"
	},
}

// MySQL is the dialect of MariaDB 10.5 and MySQL 8 or later (tested on
// MariaDB)
// (github.com/go-sql-driver/mysql), with InnoDB tables. Keys compare byte
// by byte (a binary collation): message ids differing only in case are
// different messages. The server's max_allowed_packet must be at least
// 16 MiB (MariaDB's default; MySQL 8's is 64 MiB), so that a row holding
// a largest message (qmq.MaxMessageSize) is written and read back: over
// it, the server closes the connection and the transaction is lost.
var MySQL = &Dialect{
	Name:         "mysql",
	KeyType:      "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
	BlobType:     "LONGBLOB",
	TimeType:     "BIGINT",
	Placeholder:  func(int) string { return "?" },
	IndexInTable: true,
	// INSERT IGNORE would also turn a value too long for its column into a
	// warning; every value is checked against its column before it is
	// written, so here it only skips the duplicate key.
	InsertIgnore: func(table string, cols []string) string {
		return "INSERT IGNORE INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES " + inList(len(cols))
	},
}

// rebind replaces each '?' of q by the dialect's numbered placeholder.
// The queries of this package hold no '?' of their own.
func (d *Dialect) rebind(q string) string {
	if d.Placeholder(1) == "?" {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString(d.Placeholder(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// schema returns the statements that create the outbox's tables and
// index when they do not exist.
func (d *Dialect) schema() []string {
	const index = "qmq_outbox_by_age"
	const indexCols = "(created_at, id)"
	outbox := "CREATE TABLE IF NOT EXISTS qmq_outbox (id " + d.KeyType + " PRIMARY KEY, subject " + d.KeyType + " NOT NULL, " +
		"payload " + d.BlobType + " NOT NULL, deliver_at " + d.TimeType + " NOT NULL, created_at " + d.TimeType + " NOT NULL"
	lease := "CREATE TABLE IF NOT EXISTS qmq_outbox_lease (name " + d.KeyType + " PRIMARY KEY, owner " + d.KeyType + " NOT NULL, " +
		"expires_at " + d.TimeType + " NOT NULL, renewals " + d.TimeType + " NOT NULL)"
	if d.IndexInTable {
		return []string{outbox + ", INDEX " + index + " " + indexCols + ")", lease}
	}
	return []string{outbox + ")", "CREATE INDEX IF NOT EXISTS " + index + " ON qmq_outbox " + indexCols, lease}
}

// createAttempts bounds the tries of createTables.
const createAttempts = 5

// createTables runs the statements that create tables and indexes if
// they do not exist. Processes starting at once on a new database race
// there: PostgreSQL fails all but one CREATE TABLE IF NOT EXISTS of a
// table with a duplicate key error. The statements are tried again, a
// little later each time, and a table made meanwhile by another process
// then exists.
func createTables(ctx context.Context, db *sql.DB, stmts []string) error {
	var err error
	for attempt := range createAttempts {
		if attempt > 0 && !wait.Sleep(ctx, time.Duration(attempt)*50*time.Millisecond) {
			break
		}
		if err = execAll(ctx, db, stmts); err == nil {
			return nil
		}
	}
	return err
}

func execAll(ctx context.Context, db *sql.DB, stmts []string) error {
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// processedSchema returns the statement that creates the idempotent
// consumer's table when it does not exist.
func (d *Dialect) processedSchema() string {
	return "CREATE TABLE IF NOT EXISTS qmq_processed (scope " + d.KeyType + " NOT NULL, id " + d.KeyType + " NOT NULL, " +
		"processed_at " + d.TimeType + " NOT NULL, PRIMARY KEY (scope, id))"
}

// inList returns "(?, ?, …)" with n placeholders, before rebind.
func inList(n int) string {
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
}
