//go:build linux

package outbox

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// appEnv is the environment variable that makes TestHelperApp the
// application of a process-kill test, in a process of its own; its value
// is an appSpec in JSON.
const appEnv = "QMQ_OUTBOX_TEST_APP"

// appSpec tells the application what to do.
type appSpec struct {
	// Role is "blocked" (Commits whose messages are never sent: its
	// Sender blocks) or "sending" (Commits sent to the broker).
	Role    string
	Dialect string // a dialect's name
	DSN     string
	Broker  string // the broker's client address
	Subject string
	// Commits is how many transactions it commits, each writing order i
	// and a message whose id is the order's note; it prints
	// "committed <id>" after each, then waits on its stdin to be killed.
	Commits int
}

// TestHelperApp is the application of the process-kill tests when appEnv
// is set; otherwise it does nothing.
func TestHelperApp(t *testing.T) {
	v := os.Getenv(appEnv)
	if v == "" {
		return
	}
	var spec appSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		t.Fatal(err)
	}
	if err := runApp(spec); err != nil {
		t.Fatal(err)
	}
}

// blockedSender takes every message and never sends it, as an
// application that is killed between its commit and its send.
type blockedSender struct{ p *qmq.Producer }

func (s blockedSender) Check(m *qmq.Message) error { return s.p.Check(m) }

func (s blockedSender) SendMessage(context.Context, *qmq.Message) error { select {} }

func runApp(spec appSpec) error {
	var dl dialect
	for _, d := range dialects {
		if d.name == spec.Dialect {
			dl = d
		}
	}
	if dl.d == nil {
		return fmt.Errorf("no dialect %q", spec.Dialect)
	}
	db, err := sql.Open(dl.driver, spec.DSN)
	if err != nil {
		return err
	}
	p, err := qmq.NewProducer(spec.Broker)
	if err != nil {
		return err
	}
	var s Sender = p
	if spec.Role == "blocked" {
		s = blockedSender{p}
	}
	ob, err := New(db, s, Config{Dialect: dl.d})
	if err != nil {
		return err
	}
	ctx := context.Background()
	for i := range spec.Commits {
		m := p.GenerateMessage(spec.Subject)
		err := ob.WithTx(ctx, func(tx *Tx) error {
			if _, err := tx.ExecContext(ctx, dl.d.rebind("INSERT INTO orders (id, note) VALUES (?, ?)"), i, m.ID()); err != nil {
				return err
			}
			return tx.Send(ctx, m)
		})
		if err != nil {
			return err
		}
		fmt.Printf("committed %s\n", m.ID())
	}
	_, err = io.Copy(io.Discard, os.Stdin) // until it is killed, or the test ends
	return err
}

// app is an application started by a test.
type app struct {
	cmd    *exec.Cmd
	lines  *bufio.Scanner
	stdin  io.Closer
	stderr *bytes.Buffer
	read   []string // the ids it said it committed
}

// startApp starts the test binary as the application of spec, to die with
// the test: it is killed when the test ends, and by the kernel if the test
// binary dies first.
func startApp(t *testing.T, spec appSpec) *app {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperApp$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), appEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	a := &app{cmd: cmd, stderr: new(bytes.Buffer)}
	cmd.Stderr = a.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if a.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	a.lines = bufio.NewScanner(out)
	return a
}

// readCommits reads n "committed" lines.
func (a *app) readCommits(t *testing.T, n int) {
	t.Helper()
	for len(a.read) < n {
		if !a.lines.Scan() {
			a.cmd.Process.Kill()
			a.cmd.Wait()
			t.Fatalf("the application ended after %d commits of %d: %v\n%s", len(a.read), n, a.lines.Err(), a.stderr)
		}
		id, ok := strings.CutPrefix(a.lines.Text(), "committed ")
		if !ok {
			continue // the test framework's own output
		}
		a.read = append(a.read, id)
	}
}

// kill SIGKILLs the application and waits for its end.
func (a *app) kill(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := a.cmd.Wait()
	a.stdin.Close()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the application ended with %v, not killed\n%s", err, a.stderr)
	}
}

// awaitKilledSessions waits until the server has ended every transaction
// of a killed application on orders and qmq_outbox, committing those whose
// commit it had received: a lock on both tables waits for them. (SQLite's
// locks died with the process.)
func (db *testDB) awaitKilledSessions(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch db.name {
	case "postgresql":
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, "LOCK TABLE orders, qmq_outbox IN SHARE MODE")
			tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	case "mysql":
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.ExecContext(ctx, "LOCK TABLES orders READ, qmq_outbox READ"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
			t.Fatal(err)
		}
	}
}

// committed returns the ids of the messages of the committed orders.
func (db *testDB) committed(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := db.Query("SELECT note FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// deliverLeftRows runs a watchdog until no row is left, and checks that
// the broker then holds each committed message once and nothing else.
func deliverLeftRows(t *testing.T, db *testDB, broker, subject string, committed map[string]bool) *recorder {
	t.Helper()
	rec := newRecorder(newProducer(t, broker))
	ob := db.newOutbox(t, rec, fastWatchdog)
	stop := runWatchdog(t, ob)
	poll.Until(t, 30*time.Second, "the watchdog to send every row left", func() bool { return db.rowsLeft(t) == 0 })
	stop()
	got := pullAll(t, broker, subject, "audit", len(committed))
	for id := range committed {
		if got[id] != 1 {
			t.Errorf("committed %s stored %d times, want once", id, got[id])
		}
	}
	for id, n := range got {
		if !committed[id] {
			t.Errorf("%s stored %d times, but not committed", id, n)
		}
	}
	return rec
}

// An application SIGKILLed after its commits and before their sends: the
// watchdog sends each committed message, once.
func TestKilledBetweenCommitAndSend(t *testing.T) {
	n := testcluster.Broker(t, nil)
	const commits = 20
	forEachDialect(t, func(t *testing.T, db *testDB) {
		subject := "killed.blocked." + db.name
		a := startApp(t, appSpec{Role: "blocked", Dialect: db.name, DSN: db.dsnOf, Broker: n.ClientAddr(), Subject: subject, Commits: commits})
		a.readCommits(t, commits)
		a.kill(t)
		db.awaitKilledSessions(t)

		committed := db.committed(t)
		if len(committed) != commits || db.rowsLeft(t) != commits {
			t.Fatalf("%d orders and %d rows after %d commits, want %d of each", len(committed), db.rowsLeft(t), commits, commits)
		}
		for _, id := range a.read {
			if !committed[id] {
				t.Errorf("the application committed %s, which is not in the database", id)
			}
		}
		rec := deliverLeftRows(t, db, n.ClientAddr(), subject, committed)
		for id := range committed {
			if s, d := rec.sendsOf(id); s != 1 || d != 0 {
				t.Errorf("%s sent %d times, %d answered as duplicates; want once, as new", id, s, d)
			}
		}
	})
}

// An application SIGKILLed at a random point of a loop of commits, each
// sent to the broker as it commits: some messages were stored, some were
// being sent, some rows were being deleted. The watchdog sends what is
// left, and the broker holds each committed message once.
func TestKilledWhileSending(t *testing.T) {
	n := testcluster.Broker(t, nil)
	const commits = 200
	forEachDialect(t, func(t *testing.T, db *testDB) {
		subject := "killed.sending." + db.name
		a := startApp(t, appSpec{Role: "sending", Dialect: db.name, DSN: db.dsnOf, Broker: n.ClientAddr(), Subject: subject, Commits: commits})
		at, after := 1+rand.IntN(commits*3/4), rand.N(3*time.Millisecond)
		a.readCommits(t, at)
		time.Sleep(after) // a random point in the commits and sends that follow
		a.kill(t)
		db.awaitKilledSessions(t)

		committed := db.committed(t)
		left := db.rowsLeft(t)
		for _, id := range a.read {
			if !committed[id] {
				t.Errorf("the application committed %s, which is not in the database", id)
			}
		}
		rec := deliverLeftRows(t, db, n.ClientAddr(), subject, committed)
		dups := 0
		for id := range committed {
			_, d := rec.sendsOf(id)
			dups += d
		}
		t.Logf("killed %s after reading %d commits: %d committed, %d rows left, %d of them stored before",
			after, at, len(committed), left, dups)
	})
}
