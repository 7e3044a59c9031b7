package qmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// Handler processes one message. Returning nil acknowledges it; an error
// leaves it unacknowledged, and the consumer retries it with backoff.
type Handler func(ctx context.Context, m *Message) error

type consumerOptions struct {
	name         string
	workers      int
	pullBatch    int
	pullWait     time.Duration
	heartbeat    time.Duration
	ackInterval  time.Duration
	retryBackoff time.Duration
	logger       *slog.Logger
}

func defaultConsumerOptions() consumerOptions {
	return consumerOptions{
		name: defaultConsumerName(), workers: 4, pullBatch: 64, pullWait: 5 * time.Second,
		heartbeat: 5 * time.Second, ackInterval: 50 * time.Millisecond, retryBackoff: 100 * time.Millisecond,
		logger: slog.Default(),
	}
}

// ConsumerOption configures a Subscribe or a Puller.
type ConsumerOption func(*consumerOptions)

// WithConsumerName sets the consumer's name within its group. Default: a
// name unique to the subscription (host, process id, random suffix).
func WithConsumerName(name string) ConsumerOption { return func(o *consumerOptions) { o.name = name } }

// WithWorkers sets how many handlers run at once (QMQ's executor). Default 4.
func WithWorkers(n int) ConsumerOption { return func(o *consumerOptions) { o.workers = n } }

// WithPullBatch caps the messages one pull fetches. Default 64.
func WithPullBatch(n int) ConsumerOption { return func(o *consumerOptions) { o.pullBatch = n } }

// WithPullWait sets how long one pull waits for messages. Default 5 s.
func WithPullWait(d time.Duration) ConsumerOption { return func(o *consumerOptions) { o.pullWait = d } }

// WithLogger sets where the subscription reports handler failures.
// Default slog.Default().
func WithLogger(l *slog.Logger) ConsumerOption { return func(o *consumerOptions) { o.logger = l } }

// Subscription delivers a subject's messages to a Handler as one consumer
// of a group. Close stops it gracefully.
type Subscription struct {
	p    *Puller
	opts consumerOptions
	h    Handler

	work    chan *Message
	ctx     context.Context // cancelled by Close: stops pulling and retries
	cancel  context.CancelFunc
	pulling sync.WaitGroup
	workers sync.WaitGroup

	ackMu   sync.Mutex
	toAck   map[ackKey][]int64 // pull sequences by broker group and registration
	ackKick chan struct{}
	ackDone chan struct{}
	closed  sync.Once
}

// Subscribe starts delivering subject's messages to h as a consumer of
// group, with a pool of workers (WithWorkers). Every group receives every
// message; within a group each message goes to one consumer.
func Subscribe(servers, subject, group string, h Handler, opts ...ConsumerOption) (*Subscription, error) {
	o := defaultConsumerOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.workers <= 0 || o.pullBatch <= 0 || o.pullBatch > limits.MaxPullMessages || o.pullWait <= 0 || o.pullWait > limits.MaxPullWait {
		return nil, fmt.Errorf("qmq: subscribe: workers %d must be positive, pull batch %d within 1..%d, pull wait %s within (0, %s]",
			o.workers, o.pullBatch, limits.MaxPullMessages, o.pullWait, limits.MaxPullWait)
	}
	p, err := NewPuller(servers, subject, group, WithConsumerName(o.name))
	if err != nil {
		return nil, err
	}
	s := &Subscription{p: p, opts: o, h: h, work: make(chan *Message), toAck: map[ackKey][]int64{},
		ackKick: make(chan struct{}, 1), ackDone: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for range o.workers {
		s.workers.Add(1)
		go s.worker()
	}
	s.pulling.Add(2)
	go s.pullLoop()
	go s.heartbeatLoop()
	go s.ackLoop()
	return s, nil
}

// Consumer returns the subscription's consumer name.
func (s *Subscription) Consumer() string { return s.p.consumer }

func (s *Subscription) pullLoop() {
	defer s.pulling.Done()
	backoff := 50 * time.Millisecond
	for s.ctx.Err() == nil {
		msgs, err := s.p.Pull(s.ctx, s.opts.pullBatch, s.opts.pullWait)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			s.opts.logger.Warn("qmq: pull failed", "subject", s.p.subject, "group", s.p.group, "error", err)
			wait.Sleep(s.ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		// Every pulled message is handed to a worker, even during Close: it
		// was recorded as ours and would otherwise wait for session expiry.
		for _, m := range msgs {
			s.work <- m
		}
	}
}

func (s *Subscription) heartbeatLoop() {
	defer s.pulling.Done()
	t := time.NewTicker(s.opts.heartbeat)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(s.ctx, s.opts.heartbeat)
			if err := s.p.Heartbeat(ctx); err != nil && s.ctx.Err() == nil {
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
	}
}

// process runs the handler until it succeeds, with backoff between tries.
// After Close it makes one more try, then leaves the message unacked.
func (s *Subscription) process(m *Message) {
	backoff := s.opts.retryBackoff
	for {
		err := s.h(context.Background(), m)
		if err == nil {
			s.ack(m)
			return
		}
		s.opts.logger.Warn("qmq: handler failed; retrying", "subject", m.subject, "id", m.id, "error", err)
		if s.ctx.Err() != nil || !wait.Sleep(s.ctx, backoff) {
			return
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (s *Subscription) ack(m *Message) {
	s.ackMu.Lock()
	k := ackKey{m.brokerGroup, m.epoch}
	s.toAck[k] = append(s.toAck[k], m.pullSeq)
	s.ackMu.Unlock()
	select {
	case s.ackKick <- struct{}{}:
	default:
	}
}

// ackLoop sends acks in batches, at most every ackInterval, until Close
// has flushed the last ones.
func (s *Subscription) ackLoop() {
	defer close(s.ackDone)
	for {
		_, open := <-s.ackKick
		// Acks are idempotent: failed ones are retried until they land, or
		// until Close's last attempt (then the messages are redelivered).
		for !s.flushAcks() && open && wait.Sleep(s.ctx, time.Second) {
		}
		if !open {
			return
		}
		select {
		case <-time.After(s.opts.ackInterval):
		case <-s.ctx.Done():
		}
	}
}

// flushAcks sends the acks gathered so far, to every broker group at once
// (one that does not answer delays no other). Acks that failed in a way a
// retry can mend are kept for the next flush, and it reports false; acks
// refused for good are dropped: a registration that ended (its messages
// went back to the group and come again) or a request the broker refuses.
func (s *Subscription) flushAcks() bool {
	s.ackMu.Lock()
	pending := s.toAck
	s.toAck = map[ackKey][]int64{}
	s.ackMu.Unlock()
	var ok atomic.Bool
	ok.Store(true)
	var wg sync.WaitGroup
	for k, seqs := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := s.p.ackSeqs(ctx, k, seqs)
			switch {
			case err == nil:
			case errors.Is(err, ErrStaleAck):
				s.opts.logger.Info("qmq: acks dropped: the consumer's session had expired; the messages come again",
					"subject", s.p.subject, "broker_group", k.group, "messages", len(seqs))
			case !retriable(err):
				s.opts.logger.Warn("qmq: acks dropped: the broker refused them", "subject", s.p.subject,
					"broker_group", k.group, "messages", len(seqs), "error", err)
			default:
				// Acks are idempotent: keep them for the next flush. After Close
				// the last attempt has failed, and the messages will be redelivered.
				s.opts.logger.Warn("qmq: ack failed", "subject", s.p.subject, "broker_group", k.group, "messages", len(seqs), "error", err)
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

// Close stops pulling, lets in-flight handlers finish, acknowledges what
// they processed, and closes the connections. Idempotent.
func (s *Subscription) Close() error {
	s.closed.Do(func() {
		s.cancel()
		s.pulling.Wait()
		// Pulls still under way end within the pull wait (one that is
		// retrying an unreachable group is stopped then); what they and
		// earlier pulls brought is ours, so the workers process it too.
		for _, m := range s.p.drain(s.opts.pullWait + time.Second) {
			s.work <- m
		}
		close(s.work)
		s.workers.Wait()
		close(s.ackKick)
		<-s.ackDone
		s.p.Close()
	})
	return nil
}
