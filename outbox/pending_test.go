package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/testmsg"
)

// messageOfSize returns a message of p's whose encoding is exactly size
// bytes, with the id id ("" for a generated one).
func messageOfSize(t *testing.T, p *qmq.Producer, id string, size int) *qmq.Message {
	t.Helper()
	m := p.GenerateMessage("orders")
	if id != "" {
		if err := m.SetID(id); err != nil {
			t.Fatal(err)
		}
	}
	w := testmsg.OfSize(m.ID(), "orders", 0, size) // the creation time is 8 bytes whatever its value
	m.SetBody(w.Body)
	for _, pr := range w.Properties {
		m.SetString(pr.Key, pr.Value)
	}
	return m
}

// commitAll sends msgs in one transaction and waits for the sends that
// follow its commit; it returns how many were sent then and how many rows
// were left for the watchdog.
func commitAll(t *testing.T, cfg Config, msgs func(p *qmq.Producer) []*qmq.Message) (sent, left int) {
	t.Helper()
	db := sqliteDB(t)
	rec := newRecorder(nil)
	ob := db.newOutbox(t, rec, cfg)
	commitMessages(t, ob, msgs(newProducer(t, "127.0.0.1:1")))
	return rec.total(), db.rowsLeft(t)
}

// A commit sends at once up to MaxPending messages; the rest wait for the
// watchdog.
func TestCommitSendsUpToMaxPending(t *testing.T) {
	for _, tc := range []struct {
		name       string
		n          int
		sent, left int
	}{
		{"just under", 2, 2, 0},
		{"at", 3, 3, 0},
		{"just over", 4, 3, 1},
	} {
		sent, left := commitAll(t, Config{MaxPending: 3}, func(p *qmq.Producer) []*qmq.Message {
			var msgs []*qmq.Message
			for range tc.n {
				msgs = append(msgs, p.GenerateMessage("orders"))
			}
			return msgs
		})
		if sent != tc.sent || left != tc.left {
			t.Errorf("%s MaxPending: %d sent at the commit, %d rows left; want %d and %d", tc.name, sent, left, tc.sent, tc.left)
		}
	}
}

// A commit keeps in memory, and sends at once, messages up to
// MaxPendingBytes of encoding; the rest wait for the watchdog.
func TestCommitSendsUpToMaxPendingBytes(t *testing.T) {
	const half = qmq.MaxMessageSize / 2
	for _, tc := range []struct {
		name       string
		second     int // the second message's size, the first being half
		sent, left int
	}{
		{"just under", qmq.MaxMessageSize - half - 1, 2, 0},
		{"at", qmq.MaxMessageSize - half, 2, 0},
		{"just over", qmq.MaxMessageSize - half + 1, 1, 1},
	} {
		sent, left := commitAll(t, Config{MaxPendingBytes: qmq.MaxMessageSize}, func(p *qmq.Producer) []*qmq.Message {
			return []*qmq.Message{messageOfSize(t, p, "", half), messageOfSize(t, p, "", tc.second)}
		})
		if sent != tc.sent || left != tc.left {
			t.Errorf("%s MaxPendingBytes: %d sent at the commit, %d rows left; want %d and %d", tc.name, sent, left, tc.sent, tc.left)
		}
	}
}

func TestMaxPendingBytesConfig(t *testing.T) {
	db := sqliteDB(t)
	for _, tc := range []struct {
		bytes int
		ok    bool
	}{{qmq.MaxMessageSize - 1, false}, {qmq.MaxMessageSize, true}, {qmq.MaxMessageSize + 1, true}} {
		_, err := New(db.DB, newRecorder(nil), Config{MaxPendingBytes: tc.bytes})
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("MaxPendingBytes %d: New = %v, want ok %v", tc.bytes, err, tc.ok)
		}
	}
}

// Largest messages, one with an id of the most bytes, are kept in rows,
// read back and resent by the watchdog in pages of at most
// MaxPendingBytes: a page whose every send fails ends the sweep, so the
// sends of a failed sweep count the first page. The rows are written once
// and swept with each bound, the broker down, then with the broker up.
func TestSweepPagesByBytes(t *testing.T) {
	longID := strings.Repeat("i", 128)
	db := sqliteDB(t)
	p := newProducer(t, "127.0.0.1:1")
	writer := newRecorder(nil)
	writer.down.Store(true)
	ob0 := db.newOutbox(t, writer, Config{})
	var largest []*qmq.Message
	for _, id := range []string{longID, "", ""} {
		largest = append(largest, messageOfSize(t, p, id, qmq.MaxMessageSize))
	}
	commitMessages(t, ob0, largest)
	ctx := context.Background()
	db.awaitSweepable(t, 3, fastWatchdog.Grace)

	var ob *Outbox
	rec := newRecorder(nil)
	for _, tc := range []struct {
		name      string
		bytes     int
		firstPage int
	}{
		{"one largest message", qmq.MaxMessageSize, 1},
		{"two largest messages, just under", 2*qmq.MaxMessageSize - 1, 1},
		{"two largest messages, at", 2 * qmq.MaxMessageSize, 2},
	} {
		rec = newRecorder(nil)
		rec.down.Store(true)
		cfg := fastWatchdog
		cfg.MaxPendingBytes = tc.bytes
		cfg.Owner = "sweeper" // each holds the lease the one before took
		ob = db.newOutbox(t, rec, cfg)
		if _, err := ob.Sweep(ctx); !errors.Is(err, errBrokerDown) || rec.total() != tc.firstPage {
			t.Errorf("%s: a sweep with the broker down: %v after %d sends, want the %d of its first page",
				tc.name, err, rec.total(), tc.firstPage)
		}
	}
	// Pages of two rows, then of one.
	rec.down.Store(false)
	if n, err := ob.Sweep(ctx); n != 3 || err != nil || db.rowsLeft(t) != 0 {
		t.Errorf("a sweep with the broker up: %d sent, %v, %d rows left; want 3, none, none", n, err, db.rowsLeft(t))
	}
	rec.mu.Lock()
	got := rec.last[longID]
	rec.mu.Unlock()
	if got == nil || len(got.ID()) != 128 {
		t.Error("the message with a 128-byte id was not resent")
	}
}
