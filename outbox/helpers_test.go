package outbox

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
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
