package outbox

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/transport"
)

// refusingSender acknowledges every message but those of refuse, which it
// answers as a broker refuses a message for its content.
type refusingSender struct {
	refuse map[string]bool

	mu   sync.Mutex
	sent []string
}

func (s *refusingSender) Check(m *qmq.Message) error { _, err := m.MarshalBinary(); return err }

func (s *refusingSender) SendMessage(_ context.Context, m *qmq.Message) error {
	if s.refuse[m.ID()] {
		return &transport.Error{Code: transport.Invalid, Message: "delivery time beyond this broker's maximum delay"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, m.ID())
	return nil
}

// Rows a broker refuses for their content stay for an operator and do not
// hold up the rows behind them: a full page of them at the head of the
// outbox used to end every sweep there.
func TestSweepGoesPastRefusedRows(t *testing.T) {
	db := sqliteDB(t)
	obw, p := downOutbox(t, db, db.DB)
	ids := sendIn(t, obw, p, "orders", 3)
	slices.Sort(ids) // the watchdog's order within one millisecond
	s := &refusingSender{refuse: map[string]bool{ids[0]: true, ids[1]: true}}
	cfg := fastWatchdog
	cfg.Batch = 2 // the first page: the two refused rows
	ob := db.newOutbox(t, s, cfg)
	db.awaitSweepable(t, 3, cfg.Grace)
	n, err := ob.Sweep(context.Background())
	if err != nil || n != 1 || !slices.Equal(s.sent, ids[2:]) {
		t.Fatalf("Sweep = %d, %v; sent %v, want 1, nil and %v", n, err, s.sent, ids[2:])
	}
	if left := db.rowsLeft(t); left != 2 {
		t.Errorf("%d rows left, want the 2 refused", left)
	}
}
