package testdb

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// Postgres returns the DSN (for the "pgx" driver) of a new database of
// its own for the test, on the test binary's PostgreSQL server, started
// on first use. The server runs with fsync on, as in production.
func Postgres(tb testing.TB) string {
	tb.Helper()
	return get(tb, "PostgreSQL", startPostgres).database(tb)
}

// MariaDB returns the DSN (for the "mysql" driver, with the driver's
// defaults: rows affected count changed rows, not matched ones) of a new database of its own for the test, on the
// test binary's MariaDB server, started on first use.
func MariaDB(tb testing.TB) string {
	tb.Helper()
	return get(tb, "MariaDB", startMariaDB).database(tb)
}

// dirPattern names the servers' temporary directories.
const dirPattern = "qmq-testdb-"

// ownerFile, in a server's directory, holds the process id of the test
// binary that made it.
const ownerFile = "owner.pid"

// newServer makes the server's temporary directory, owned by the account
// it runs as, and its log file, after removing the directories of test
// binaries that died without stopping their servers.
func newServer(name string, a runAs) (*server, *os.File, error) {
	removeOrphans()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	if err := a.own(dir); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return &server{name: name, dir: dir}, log, nil
}

// removeOrphans removes the server directories whose test binary is gone
// (killed: the kernel killed its servers too, see runAs.command).
func removeOrphans() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being made, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && pid > 0 && syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
}

func startPostgres() (*server, error) {
	const pkg = "postgresql"
	initdb, err := findProgram("PostgreSQL", pkg, "/usr/lib/postgresql/*/bin/initdb", "initdb")
	if err != nil {
		return nil, err
	}
	postgres := filepath.Join(filepath.Dir(initdb), "postgres")
	a, err := accountFor("postgres", "nobody")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s, log, err := newServer("PostgreSQL", a)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	data := filepath.Join(s.dir, "data")
	err = a.run(log, initdb, "--pgdata", data, "--username", "qmq", "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync")
	if err == nil {
		err = s.serve(a, log, "pgx", pgDSN(port, "postgres"), postgres, "-D", data,
			"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-k", s.dir, "-c", "max_connections=200")
	}
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("testdb: PostgreSQL: %w", err)
	}
	s.dsn = func(db string) string { return pgDSN(port, db) }
	s.drop = "DROP DATABASE %s WITH (FORCE)"
	return s, nil
}

func pgDSN(port int, db string) string {
	return fmt.Sprintf("postgres://qmq@127.0.0.1:%d/%s?sslmode=disable", port, db)
}

func startMariaDB() (*server, error) {
	const pkg = "mariadb-server"
	install, err := findProgram("MariaDB", pkg, "mariadb-install-db", "mysql_install_db")
	if err != nil {
		return nil, err
	}
	mariadbd, err := findProgram("MariaDB", pkg, "mariadbd", "/usr/sbin/mariadbd", "mysqld", "/usr/sbin/mysqld")
	if err != nil {
		return nil, err
	}
	a, err := accountFor("mysql", "root")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s, log, err := newServer("MariaDB", a)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	data := filepath.Join(s.dir, "data")
	err = a.run(log, install, "--no-defaults", "--datadir="+data, "--user="+a.name,
		"--auth-root-authentication-method=normal", "--skip-test-db")
	if err == nil {
		err = s.serve(a, log, "mysql", myDSN(port, ""), mariadbd, "--no-defaults", "--datadir="+data,
			"--user="+a.name, "--bind-address=127.0.0.1", "--port="+strconv.Itoa(port),
			"--socket="+filepath.Join(s.dir, "mariadb.sock"), "--pid-file="+filepath.Join(s.dir, "mariadb.pid"),
			"--innodb-buffer-pool-size=64M", "--max-connections=200")
	}
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("testdb: MariaDB: %w", err)
	}
	s.dsn = func(db string) string { return myDSN(port, db) }
	s.drop = "DROP DATABASE %s"
	return s, nil
}

func myDSN(port int, db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s", port, db)
}
