package outbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/test/poll"
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
	// Each commit's message is either being sent or queued. A sender that
	// starts late takes every commit queued by then, so how many messages
	// are in flight depends on scheduling; how many senders run does not.
	var senders, queued int
	poll.Until(t, 10*time.Second, "every commit's message in flight or queued", func() bool {
		ob.mu.Lock()
		senders, queued = ob.senders, len(ob.committed)
		ob.mu.Unlock()
		return s.load()+queued == commits
	})
	if senders != maxCommittedSenders || queued == 0 {
		t.Errorf("%d senders and %d commits queued, want %d senders and the other commits queued", senders, queued, maxCommittedSenders)
	}
	close(s.open)
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if left := db.rowsLeft(t); left != 0 {
		t.Errorf("%d rows left, want 0", left)
	}
	poll.Until(t, 10*time.Second, "the senders to stop once nothing is queued", func() bool {
		ob.mu.Lock()
		defer ob.mu.Unlock()
		return ob.senders == 0
	})
}
