package testdb

import (
	"database/sql"
	"os"
	"testing"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

// Each server starts, takes a table, and gives every test a database of
// its own.
func TestServers(t *testing.T) {
	for _, c := range []struct {
		driver string
		dsn    func(testing.TB) string
	}{{"pgx", Postgres}, {"mysql", MariaDB}} {
		t.Run(c.driver, func(t *testing.T) {
			first, second := c.dsn(t), c.dsn(t)
			if first == second {
				t.Fatalf("two databases with one DSN %q", first)
			}
			for _, dsn := range []string{first, second} {
				db, err := sql.Open(c.driver, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				if _, err := db.Exec("CREATE TABLE t (n INTEGER)"); err != nil {
					t.Fatalf("%s: %v", dsn, err)
				}
				if _, err := db.Exec("INSERT INTO t VALUES (1)"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
