package qmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// closeTimeout is how long Close lets its Drain take before it gives up on
// the handlers.
const closeTimeout = 30 * time.Second

// shutdownState is a Subscription's way down: the first Stop, Drain or
// Close starts it; a Stop or a caller whose context ends while it runs
// makes it leave what is not yet handed out.
type shutdownState struct {
	start     sync.Once
	leave     chan struct{} // closed: messages not yet handed to a handler are left
	leaveOnce sync.Once
	gaveUp    atomic.Bool  // a caller's context ended: the handlers' was cancelled
	left      atomic.Int64 // pulled messages left unprocessed
	done      chan struct{}
	err       error // set before done is closed
}

func newShutdownState() shutdownState {
	return shutdownState{leave: make(chan struct{}), done: make(chan struct{})}
}

// Stop stops the subscription now: it stops pulling, cancels the pulls
// under way, lets the handlers that are running finish (however long they
// take: their context is not cancelled), sends the acks of every handler
// that finished, and closes the connections. Messages already pulled and
// not yet handed to a handler are not processed: they stay the consumer's
// until its session expires (30 s by default after Stop returns), then go
// back to the group, or at once to a new Puller or subscription with the
// same consumer name (WithConsumerName). Idempotent; it also hurries a
// Drain or Close under way.
func (s *Subscription) Stop() {
	s.leaveRest()
	s.shutdown(context.Background(), false)
}

// Drain stops the subscription gracefully: it stops pulling, waits for
// the pulls under way (up to the pull wait and 10 s more, as a pull itself
// does: at most once, a pull cut short loses what it handed out), hands every
// message pulled to the handlers and waits for them, sends their acks, and
// closes the connections; it returns nil once all that is done.
//
// When ctx ends first, Drain gives up: messages not yet handed to a
// handler are left (they come back as after Stop), the context of the
// running handlers is cancelled, and Drain still waits for them to return
// (a handler that ignores its context holds it), sends the acks of those
// that succeeded (for up to 10 s), and returns an error wrapping
// ctx.Err(). Idempotent: a call after the subscription is down returns at
// once.
func (s *Subscription) Drain(ctx context.Context) error {
	return s.shutdown(ctx, true)
}

// Close is Drain with a 30-second limit: every message pulled is handled
// unless the handlers take longer than that, when their context is
// cancelled and what is not yet handed out is left for the group.
// Idempotent.
func (s *Subscription) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.closeTimeout)
	defer cancel()
	return s.Drain(ctx)
}

// shutdown starts the way down once, and waits for it; if ctx ends first
// it gives up on the handlers and waits for them to return.
func (s *Subscription) shutdown(ctx context.Context, drain bool) error {
	s.start.Do(func() { go s.runShutdown(drain) })
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
	}
	s.giveUp()
	<-s.done
	if s.err == nil {
		return nil // it had finished when ctx ended
	}
	return fmt.Errorf("%w: %w", s.err, ctx.Err())
}

// leaveRest makes the subscription hand no more messages to its handlers.
func (s *Subscription) leaveRest() {
	s.leaveOnce.Do(func() { close(s.leave) })
}

// giveUp leaves what is not handed out and cancels the handlers' context.
func (s *Subscription) giveUp() {
	s.gaveUp.Store(true)
	s.leaveRest()
	s.stopHandlers()
}

// handOut hands msgs to the handlers one by one, unless the rest are to be
// left; it reports whether it handed them all.
func (s *Subscription) handOut(msgs []*Message) bool {
	for i, m := range msgs {
		select {
		case <-s.leave:
			s.left.Add(int64(len(msgs) - i))
			return false
		default:
		}
		select {
		case s.work <- m:
		case <-s.leave:
			s.left.Add(int64(len(msgs) - i))
			return false
		}
	}
	return true
}

// runShutdown takes the subscription down: pulls, then handlers, then
// heartbeats, then acks, then connections.
func (s *Subscription) runShutdown(drain bool) {
	s.stopPulling()
	s.pulling.Wait()
	// Pulls still under way end within the pull wait, or are cancelled
	// (what they took comes again after the session expires; at most once
	// it is lost). What they and earlier pulls brought is ours: a drain
	// waits for them as long as a pull itself does, and hands it out too.
	patience := time.Duration(0)
	if drain {
		patience = s.opts.pullWait + pullSlack
	}
	pulls, cancel := context.WithTimeout(s.handlerCtx, patience)
	s.handOut(s.p.drain(pulls))
	cancel()
	close(s.work)
	s.workers.Wait()
	// Heartbeats kept the session while the handlers ran, so that their
	// acks are not refused as stale.
	s.stopHeartbeat()
	s.beating.Wait()
	close(s.ackKick)
	<-s.ackDone
	s.p.Close()
	s.stopHandlers()
	if left, gaveUp := s.left.Load(), s.gaveUp.Load(); drain && (left > 0 || gaveUp) {
		msg := fmt.Sprintf("qmq: drain of %s for group %s cut short: %d pulled messages not handed to a handler", s.p.subject, s.p.group, left)
		if gaveUp {
			msg += ", the running handlers' context cancelled"
		}
		s.err = errors.New(msg + "; what was not acknowledged comes again once the consumer's session expires")
	}
	close(s.done)
}
