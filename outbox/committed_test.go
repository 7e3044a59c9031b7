package outbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/await"
)

// gateSender holds every send until open is closed, counting those under
// way.
type gateSender struct {
	open chan struct{}

	mu       sync.Mutex
	underWay int
}

func (s *gateSender) Check(m *qmq.Message) error { _, err := m.MarshalBinary(); return err }

func (s *gateSender) SendMessage(ctx context.Context, _ *qmq.Message) error {
	s.mu.Lock()
	s.underWay++
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.underWay--; s.mu.Unlock() }()
	select {
	case <-s.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *gateSender) load() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.underWay
}

// What commits claim is sent by at most maxCommittedSenders goroutines:
// while they are busy, later commits queue, and are then sent together
// (their rows deleted in one statement), rather than a goroutine and a
// database connection each.
func TestCommitsQueueBehindBusySenders(t *testing.T) {
	const commits = 50
	db := sqliteDB(t)
	s := &gateSender{open: make(chan struct{})}
	ob := db.newOutbox(t, s, Config{})
	p := newProducer(t, "127.0.0.1:1") // makes messages only
	ctx := context.Background()
	for range commits {
		if err := ob.WithTx(ctx, func(tx *Tx) error { return tx.Send(ctx, p.GenerateMessage("orders")) }); err != nil {
			t.Fatal(err)
		}
	}
	await.True(t, 10*time.Second, "the senders to be busy", func() bool {
		return s.load() == maxCommittedSenders
	})
	ob.mu.Lock()
	senders, queued := ob.senders, len(ob.committed)
	ob.mu.Unlock()
	if senders != maxCommittedSenders || queued != commits-maxCommittedSenders {
		t.Errorf("%d senders and %d commits queued, want %d and %d", senders, queued, maxCommittedSenders, commits-maxCommittedSenders)
	}
	close(s.open)
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if left := db.rowsLeft(t); left != 0 {
		t.Errorf("%d rows left, want 0", left)
	}
	await.True(t, 10*time.Second, "the senders to stop once nothing is queued", func() bool {
		ob.mu.Lock()
		defer ob.mu.Unlock()
		return ob.senders == 0
	})
}
