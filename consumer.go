package qmq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// Handler processes one message. Returning nil acknowledges it; an error
// nacks it: the broker hands it to the group again after the group's
// backoff for its delivery count (Message.Deliveries), or when a
// RetryError the error is or wraps says (RetryAfter, RetryAt); at the
// group's most deliveries it becomes a dead letter. The worker is free at
// once: a message that keeps failing never holds one. With WithAtMostOnce
// nothing is acknowledged or nacked: an error is only logged. ctx is
// cancelled when Drain or Close gives up waiting for the handler: a long
// handler should return when it is done (and call Message.InProgress
// within each ack wait of its group, 30 s by default).
type Handler func(ctx context.Context, m *Message) error

// Subscription delivers a subject's messages to a Handler as one consumer
// of a group. Drain or Close stop it gracefully, Stop at once.
type Subscription struct {
	p            *Puller
	opts         subscribeOptions
	h            Handler
	closeTimeout time.Duration // how long Close lets Drain take

	work   chan *Message // unbuffered: a message is pulled, or handed to a handler
	inHand atomic.Int64  // messages pulled and not yet handled: the pull loop counts them in, workers out
	freed  chan struct{} // a worker finished one (capacity 1)

	pullCtx       context.Context // cancelled by shutdown: stops pulling
	stopPulling   context.CancelFunc
	handlerCtx    context.Context // the handlers': cancelled when shutdown gives up on them
	stopHandlers  context.CancelFunc
	beatCtx       context.Context // heartbeats go on until the handlers are done
	stopHeartbeat context.CancelFunc
	pulling       sync.WaitGroup
	beating       sync.WaitGroup
	workers       sync.WaitGroup

	ackMu   sync.Mutex
	toAck   map[settlement][]int64 // pull sequences to ack or nack, by broker group and registration
	ackKick chan struct{}
	ackDone chan struct{}

	shutdownState
}

// Subscribe starts delivering subject's messages to h as a consumer of
// group, with a pool of workers (WithWorkers). Every group receives every
// message; within a group each message goes to one consumer.
func Subscribe(servers, subject, group string, h Handler, opts ...SubscribeOption) (*Subscription, error) {
	o := defaultSubscribeOptions()
	for _, opt := range opts {
		opt.applySubscribe(&o)
	}
	if o.workers <= 0 || o.pullBatch <= 0 || o.pullBatch > limits.MaxPullMessages || o.pullWait <= 0 || o.pullWait > limits.MaxPullWait {
		return nil, fmt.Errorf("qmq: subscribe: workers %d must be positive, pull batch %d within 1..%d, pull wait %s within (0, %s]",
			o.workers, o.pullBatch, limits.MaxPullMessages, o.pullWait, limits.MaxPullWait)
	}
	p, err := newPuller(servers, subject, group, pullerOptions{o.consumerOptions})
	if err != nil {
		return nil, err
	}
	s := &Subscription{p: p, opts: o, h: h, closeTimeout: closeTimeout, work: make(chan *Message), freed: make(chan struct{}, 1), toAck: map[settlement][]int64{},
		ackKick: make(chan struct{}, 1), ackDone: make(chan struct{}), shutdownState: newShutdownState()}
	s.pullCtx, s.stopPulling = context.WithCancel(context.Background())
	s.handlerCtx, s.stopHandlers = context.WithCancel(context.Background())
	s.beatCtx, s.stopHeartbeat = context.WithCancel(context.Background())
	for range o.workers {
		s.workers.Add(1)
		go s.worker()
	}
	s.pulling.Add(1)
	go s.pullLoop()
	s.beating.Add(1)
	go s.heartbeatLoop()
	go s.ackLoop()
	return s, nil
}

// Consumer returns the subscription's consumer name.
func (s *Subscription) Consumer() string { return s.p.consumer }

// Group returns the consumer group the subscription consumes as: the group
// it was given, or with WithBroadcast the group of its own.
func (s *Subscription) Group() string { return s.p.group }

func (s *Subscription) pullLoop() {
	defer s.pulling.Done()
	backoff := 50 * time.Millisecond
	for s.pullCtx.Err() == nil {
		// Pull only what free workers can start: the ack wait runs from the
		// pull, and a message queued behind slow handlers would expire and
		// count a delivery before its handler began.
		free := s.opts.workers - int(s.inHand.Load())
		if free <= 0 {
			select {
			case <-s.freed:
			case <-s.pullCtx.Done():
				return
			}
			continue
		}
		msgs, err := s.p.Pull(s.pullCtx, min(s.opts.pullBatch, free), s.opts.pullWait)
		if err != nil {
			if s.pullCtx.Err() != nil {
				return
			}
			s.opts.logger.Warn("qmq: pull failed", "subject", s.p.subject, "group", s.p.group, "error", err)
			wait.Sleep(s.pullCtx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		// Every pulled message is handed to a handler, even once Drain has
		// begun: it was recorded as ours and would otherwise wait for the
		// session to expire. Stop, or Drain giving up, leaves the rest.
		s.inHand.Add(int64(len(msgs)))
		if !s.handOut(msgs) {
			return
		}
	}
}

func (s *Subscription) heartbeatLoop() {
	defer s.beating.Done()
	t := time.NewTicker(s.opts.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.beatCtx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.beatCtx, s.opts.heartbeat)
			if err := s.p.Heartbeat(ctx); err != nil && s.beatCtx.Err() == nil {
				s.opts.logger.Warn("qmq: heartbeat failed", "subject", s.p.subject, "group", s.p.group, "error", err)
			}
			cancel()
		}
	}
}

func (s *Subscription) worker() {
	defer s.workers.Done()
	for m := range s.work {
		s.process(m)
		s.inHand.Add(-1)
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// process runs the handler once, and acks or nacks the message by what it
// returns.
func (s *Subscription) process(m *Message) {
	err := s.h(s.handlerCtx, m)
	switch {
	case m.atMostOnce:
		if err != nil {
			s.opts.logger.Warn("qmq: handler failed on a message pulled at most once; it does not come again",
				"subject", m.subject, "id", m.id, "error", err)
		}
	case err == nil:
		s.settle(m, settlement{})
	case s.handlerCtx.Err() != nil:
		// The subscription gave up on its handlers: the message was not
		// at fault, so it goes back to the group at once.
		s.opts.logger.Warn("qmq: handler cut short by the subscription going down; the message comes again",
			"subject", m.subject, "id", m.id, "error", err)
		s.settle(m, nackSettlement(RetryAfter(0), time.Now()))
	default:
		var retry *RetryError
		errors.As(err, &retry)
		s.opts.logger.Warn("qmq: handler failed; the message comes again", "subject", m.subject, "id", m.id,
			"deliveries", m.deliveries, "error", err)
		s.settle(m, nackSettlement(retry, time.Now()))
	}
}

// settle queues an ack or a nack for the ack loop to send.
func (s *Subscription) settle(m *Message, o settlement) {
	o.ackKey = ackKey{m.brokerGroup, m.epoch}
	s.ackMu.Lock()
	s.toAck[o] = append(s.toAck[o], m.pullSeq)
	s.ackMu.Unlock()
	select {
	case s.ackKick <- struct{}{}:
	default:
	}
}

// ackTimeout bounds one ack or nack request; lastAckTimeout bounds the
// last flush, once the handlers are done.
const (
	ackTimeout     = 30 * time.Second
	lastAckTimeout = 10 * time.Second
)

// ackLoop sends acks and nacks in batches, at most every ackInterval,
// until shutdown has flushed the last ones.
func (s *Subscription) ackLoop() {
	defer close(s.ackDone)
	for {
		if _, open := <-s.ackKick; !open {
			// The last attempt: what fails now is delivered again.
			s.flushAcks(context.Background(), lastAckTimeout)
			return
		}
		// Acks and nacks are idempotent: failed ones are retried until they land, or
		// until shutdown (then the last flush tries them once more). A
		// shutdown that gives up on its handlers cuts a flush short too.
		for !s.flushAcks(s.handlerCtx, ackTimeout) && wait.Sleep(s.pullCtx, time.Second) {
		}
		select {
		case <-time.After(s.opts.ackInterval):
		case <-s.pullCtx.Done():
		}
	}
}

// flushAcks sends the acks and nacks gathered so far, to every broker
// group at once (one that does not answer delays no other), each request
// bounded by ctx and timeout. Those that failed in a way a retry can mend
// are kept for the next flush, and it reports false; those refused for
// good are dropped: a registration that ended (its messages went back to
// the group and come again) or a request the broker refuses.
func (s *Subscription) flushAcks(ctx context.Context, timeout time.Duration) bool {
	s.ackMu.Lock()
	pending := s.toAck
	s.toAck = map[settlement][]int64{}
	s.ackMu.Unlock()
	var ok atomic.Bool
	ok.Store(true)
	var wg sync.WaitGroup
	for k, seqs := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			what := "acks"
			if k.nack {
				what = "nacks"
			}
			err := s.p.settle(ctx, k, seqs)
			switch {
			case err == nil:
			case errors.Is(err, ErrStaleAck):
				s.opts.logger.Info("qmq: "+what+" dropped: the consumer's session had expired; the messages come again",
					"subject", s.p.subject, "broker-group", k.group, "messages", len(seqs))
			case !retriable(err):
				s.opts.logger.Warn("qmq: "+what+" dropped: the broker refused them", "subject", s.p.subject,
					"broker-group", k.group, "messages", len(seqs), "error", err)
			default:
				s.opts.logger.Warn("qmq: "+what+" failed", "subject", s.p.subject, "broker-group", k.group, "messages", len(seqs), "error", err)
				s.ackMu.Lock()
				s.toAck[k] = append(s.toAck[k], seqs...)
				s.ackMu.Unlock()
				ok.Store(false)
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// retriable reports whether a failed request may succeed if sent again:
// a broker's answer says so; any other failure (a lookup, a connection)
// may mend.
func retriable(err error) bool {
	var e *transport.Error
	if errors.As(err, &e) {
		return e.Retriable()
	}
	return true
}
