package outbox

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/testcluster"
)

func newProducer(t *testing.T, addr string, opts ...qmq.ProducerOption) *qmq.Producer {
	t.Helper()
	p, err := qmq.NewProducer(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// openDB opens (creating) the SQLite database file path, with a busy
// timeout, as the package documentation asks.
func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func tempDB(t *testing.T) *sql.DB { return openDB(t, filepath.Join(t.TempDir(), "app.db")) }

func newOutbox(t *testing.T, db *sql.DB, s Sender, cfg Config) *Outbox {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testcluster.Logger(t)
	}
	ob, err := New(db, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

func count(t *testing.T, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func rowsLeft(t *testing.T, db *sql.DB) int { return count(t, db, "SELECT count(*) FROM qmq_outbox") }

// recorder is a Sender that counts what it is asked to send. With a
// Producer it sends for real; without, it acknowledges without sending.
// down fails every send without sending; loseAck sends, then reports a
// failure, as when the answer is lost.
type recorder struct {
	p       *qmq.Producer
	down    atomic.Bool
	loseAck atomic.Bool

	mu    sync.Mutex
	sends map[string]int // id → sends asked
	dups  map[string]int // id → sends the broker answered as duplicates
	last  map[string]*qmq.Message
}

func newRecorder(p *qmq.Producer) *recorder {
	return &recorder{p: p, sends: map[string]int{}, dups: map[string]int{}, last: map[string]*qmq.Message{}}
}

func (r *recorder) Check(m *qmq.Message) error {
	if r.p != nil {
		return r.p.Check(m)
	}
	_, err := m.MarshalBinary()
	return err
}

func (r *recorder) SendMessage(ctx context.Context, m *qmq.Message) error {
	r.mu.Lock()
	r.sends[m.ID()]++
	r.last[m.ID()] = m
	r.mu.Unlock()
	if r.down.Load() {
		return errBrokerDown
	}
	if r.p != nil {
		if err := r.p.SendMessage(ctx, m); err != nil {
			return err
		}
		if m.Duplicate() {
			r.mu.Lock()
			r.dups[m.ID()]++
			r.mu.Unlock()
		}
	}
	if r.loseAck.Load() {
		return errAckLost
	}
	return nil
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.sends {
		n += c
	}
	return n
}

func (r *recorder) sendsOf(id string) (sends, dups int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sends[id], r.dups[id]
}

type testError string

func (e testError) Error() string { return string(e) }

const (
	errBrokerDown = testError("test: broker down")
	errAckLost    = testError("test: answer lost")
)

// pullAll pulls subject from the start as a new group until it has want
// messages, and returns how many times each id came.
func pullAll(t *testing.T, addr, subject, group string, want int) map[string]int {
	t.Helper()
	pl, err := qmq.NewPuller(addr, subject, group, qmq.StartAt(qmq.Earliest))
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[string]int{}
	n := 0
	for n < want {
		msgs, err := pl.Pull(ctx, 100, 200*time.Millisecond)
		if err != nil {
			t.Fatalf("pull %s: %v (have %d of %d)", subject, err, n, want)
		}
		for _, m := range msgs {
			got[m.ID()]++
			n++
		}
		if len(msgs) > 0 {
			if err := pl.Ack(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Anything more (a copy stored twice) comes within a short pull.
	msgs, err := pl.Pull(ctx, 100, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		got[m.ID()]++
	}
	return got
}
