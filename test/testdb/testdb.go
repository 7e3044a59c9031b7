// Package testdb starts throwaway PostgreSQL and MariaDB servers for tests:
// one of each per test binary, on first use, in a temporary directory, on
// a loopback port, and gives each test a database of its own.
//
// A package that uses it runs its tests through Run, which stops the
// servers and removes their directories when the tests end, failed or
// not:
//
//	func TestMain(m *testing.M) { os.Exit(testdb.Run(m)) }
//
// A server is also killed by the kernel if the test binary dies first
// (a panic, a timeout), so none outlives its tests.
//
// The servers' programs must be installed: `make test` installs them
// (Debian's postgresql and mariadb-server) when it runs as root. A test
// that needs a server which is not installed fails and says how to
// install it; it is never skipped.
package testdb

import (
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// A server is one running database server of the test binary.
type server struct {
	name    string // "PostgreSQL", "MariaDB"
	dir     string // its temporary directory, removed by stop
	proc    *os.Process
	exited  chan struct{} // closed when proc has been waited for
	admin   *sql.DB       // connected as its superuser, to create databases
	dsn     func(db string) string
	drop    string       // the statement that drops a database, with %s for its name
	created atomic.Int64 // databases created, for their names
}

var (
	mu      sync.Mutex
	started = map[string]*server{} // by name
	failed  = map[string]error{}   // by name: a start that failed, not retried
)

// Run runs the tests of m and then stops every server they started; it
// returns m.Run's exit code, or 1 if a server did not stop cleanly.
func Run(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	for name, s := range started {
		if err := s.stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testdb: stop %s: %v\n", name, err)
			code = max(code, 1)
		}
		delete(started, name)
	}
	return code
}

// get returns the running server name, starting it with start on first
// use; a start that failed fails every later test that asks, with the
// same error, without trying again.
func get(tb testing.TB, name string, start func() (*server, error)) *server {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	if s := started[name]; s != nil {
		return s
	}
	if err := failed[name]; err != nil {
		tb.Fatal(err)
	}
	s, err := start()
	if err != nil {
		failed[name] = err
		tb.Fatal(err)
	}
	started[name] = s
	return s
}

// database creates a database of its own for the test on s and returns
// the DSN that reaches it; the database is dropped when the test ends.
func (s *server) database(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("qmq_test_%d", s.created.Add(1))
	if _, err := s.admin.Exec("CREATE DATABASE " + name); err != nil {
		tb.Fatalf("%s: create database %s: %v", s.name, name, err)
	}
	tb.Cleanup(func() {
		if _, err := s.admin.Exec(fmt.Sprintf(s.drop, name)); err != nil {
			tb.Errorf("%s: drop database %s: %v", s.name, name, err)
		}
	})
	return s.dsn(name)
}
