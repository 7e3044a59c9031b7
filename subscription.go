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
// within each ack wait of its group, 30 s by default). ctx carries the
// span of handling m when tracing is on (WithTracerProvider): spans the
// handler starts from ctx, and contexts it passes on, continue the trace
// of the message's send.
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
	took   atomic.Int64  // a handler call's recent duration in nanoseconds (a moving average; 0 until one ran)

	pullCtx       context.Context // cancelled by shutdown: stops pulling
	stopPulling   context.CancelFunc
	handlerCtx    context.Context // the handlers': cancelled when shutdown gives up on them
	stopHandlers  context.CancelFunc
	beatCtx       context.Context // heartbeats go on until the handlers are done
	stopHeartbeat context.CancelFunc
	pulling       sync.WaitGroup
	beating       sync.WaitGroup
	workers       sync.WaitGroup

	ackMu    sync.Mutex
	toAck    map[settlement][]int64 // pull sequences to ack or nack, by broker group and registration
	flying   map[string]bool        // broker groups with a flush of acks under way
	ackKick  chan struct{}
	ackRetry chan struct{} // a broker group's flush ended with more to send (capacity 1)
	ackDone  chan struct{}
	flushes  sync.WaitGroup

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
		return nil, sdkError(err)
	}
	s := &Subscription{p: p, opts: o, h: h, closeTimeout: closeTimeout, work: make(chan *Message), freed: make(chan struct{}, 1), toAck: map[settlement][]int64{},
		flying: map[string]bool{}, ackKick: make(chan struct{}, 1), ackRetry: make(chan struct{}, 1), ackDone: make(chan struct{}),
		shutdownState: newShutdownState()}
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
		// Pull only what the workers can start soon: the ack wait runs from
		// the pull, and a message queued behind slow handlers would expire
		// and count a delivery before its handler began.
		room := s.room()
		if room <= 0 {
			select {
			case <-s.freed:
			case <-s.pullCtx.Done():
				return
			}
			continue
		}
		msgs, err := s.p.Pull(s.pullCtx, min(s.opts.pullBatch, room), s.opts.pullWait)
		if err != nil {
			if s.pullCtx.Err() != nil {
				return
			}
			s.opts.logger.Warn("qmq: pull failed", "subject", s.p.subject, "consumer_group", s.p.group, "error", err)
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

// queueBudget is how long a pulled message may be expected to wait in the
// client for a worker, by the handlers' recent times: a quarter of the
// shortest ack wait a group may have (limits.MinAckWait, 1 s).
const queueBudget = 250 * time.Millisecond

// room is how many more messages the subscription may pull now: one per
// free worker, and as many more as the workers are expected to start
// within queueBudget (none until a handler has run: a first pull takes
// only what its workers start at once).
func (s *Subscription) room() int {
	capacity := s.opts.workers
	if took := time.Duration(s.took.Load()); took > 0 {
		capacity += int(min(int64(s.opts.workers)*int64(queueBudget/took), int64(limits.MaxPullMessages)))
	}
	// What the Puller holds pulled and not yet returned is not counted: a
	// Pull returns it before it fetches more, and counting it could leave
	// the subscription waiting for workers to free room it never frees.
	return capacity - int(s.inHand.Load())
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
				s.opts.logger.Warn("qmq: heartbeat failed", "subject", s.p.subject, "consumer_group", s.p.group, "error", err)
			}
			cancel()
		}
	}
}

func (s *Subscription) worker() {
	defer s.workers.Done()
	for m := range s.work {
		start := time.Now()
		s.process(m)
		s.observe(time.Since(start))
		s.inHand.Add(-1)
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// observe adds a handler call's duration to the moving average room uses
// (an eighth of each new one).
func (s *Subscription) observe(d time.Duration) {
	d = max(d, time.Microsecond)
	for {
		old := s.took.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if s.took.CompareAndSwap(old, max(next, 1)) {
			return
		}
	}
}

// process runs the handler once, and acks or nacks the message by what it
// returns.
func (s *Subscription) process(m *Message) {
	ctx, span := s.p.opts.tracing.startProcess(s.handlerCtx, s.p.group, m)
	err := s.h(ctx, m)
	endProcess(span, err)
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
// until shutdown has flushed the last ones. Each broker group's are sent
// on their own (flushGroup): one whose broker does not answer holds back
// no other's, whose messages would otherwise pass their ack wait and come
// again.
func (s *Subscription) ackLoop() {
	defer close(s.ackDone)
	for {
		select {
		case _, open := <-s.ackKick:
			if !open {
				// The last attempt, once the flushes under way end: what
				// fails now is delivered again.
				s.flushes.Wait()
				s.flushAcks(context.Background(), lastAckTimeout)
				return
			}
		case <-s.ackRetry:
		}
		s.startFlushes()
		select {
		case <-time.After(s.opts.ackInterval):
		case <-s.pullCtx.Done():
		}
	}
}

// startFlushes starts a flush for every broker group with acks or nacks
// to send and none under way.
func (s *Subscription) startFlushes() {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	byGroup := map[string]map[settlement][]int64{}
	for k, seqs := range s.toAck {
		if s.flying[k.group] {
			continue
		}
		if byGroup[k.group] == nil {
			byGroup[k.group] = map[settlement][]int64{}
		}
		byGroup[k.group][k] = seqs
		delete(s.toAck, k)
	}
	for group, pending := range byGroup {
		s.flying[group] = true
		s.flushes.Add(1)
		go s.flushGroup(group, pending)
	}
}

// flushGroup sends one broker group's acks and nacks; those that failed in
// a way a retry can mend are tried again after a second.
func (s *Subscription) flushGroup(group string, pending map[settlement][]int64) {
	defer s.flushes.Done()
	ok := s.send(s.handlerCtx, ackTimeout, pending)
	s.ackMu.Lock()
	s.flying[group] = false
	more := false
	for k := range s.toAck {
		more = more || k.group == group
	}
	s.ackMu.Unlock()
	if !ok {
		wait.Sleep(s.pullCtx, time.Second)
	}
	if more || !ok {
		select {
		case s.ackRetry <- struct{}{}:
		default:
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
	return s.send(ctx, timeout, pending)
}

// send sends pending, each request bounded by ctx and timeout, keeping for
// the next flush what failed in a way a retry can mend; it reports whether
// nothing did.
func (s *Subscription) send(ctx context.Context, timeout time.Duration, pending map[settlement][]int64) bool {
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
					"subject", s.p.subject, "broker_group", k.group, "messages", len(seqs))
			case !retriable(err):
				s.opts.logger.Warn("qmq: "+what+" dropped: the broker refused them", "subject", s.p.subject,
					"broker_group", k.group, "messages", len(seqs), "error", err)
			default:
				s.opts.logger.Warn("qmq: "+what+" failed", "subject", s.p.subject, "broker_group", k.group, "messages", len(seqs), "error", err)
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
