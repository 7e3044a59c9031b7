package proctest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
)

// Sender sends to one subject in a loop, a message at a time, and counts
// the sends the producer acknowledged and those it returned an error for
// (after its own retries).
type Sender struct {
	sent, failed atomic.Int64
	firstErr     atomic.Value
	stop, done   chan struct{}
}

// StartSender starts the loop on p; the test's cleanup stops it.
func StartSender(t testing.TB, p *qmq.Producer, subject string) *Sender {
	s := &Sender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := p.SendMessage(ctx, p.GenerateMessage(subject))
			cancel()
			if err != nil {
				s.failed.Add(1)
				s.firstErr.CompareAndSwap(nil, err)
			} else {
				s.sent.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(s.Stop)
	return s
}

// Sent is the sends acknowledged so far.
func (s *Sender) Sent() int64 { return s.sent.Load() }

// WaitSent waits until n more sends than now are acknowledged.
func (s *Sender) WaitSent(t testing.TB, n int64) {
	t.Helper()
	want := s.sent.Load() + n
	Poll(t, 20*time.Second, fmt.Sprintf("%d more sends", n), func() error {
		if got := s.sent.Load(); got < want {
			return fmt.Errorf("%d sent of %d, %d failed", got, want, s.failed.Load())
		}
		return nil
	})
}

// Stop stops the loop and waits for its last send.
func (s *Sender) Stop() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// Check stops the loop and fails the test if any send failed.
func (s *Sender) Check(t testing.TB) {
	t.Helper()
	s.Stop()
	if n := s.failed.Load(); n > 0 {
		t.Errorf("%d of %d sends failed; the first: %v", n, n+s.sent.Load(), s.firstErr.Load())
	}
}
