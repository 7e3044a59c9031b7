package qmq

import "time"

// SubscribeOption configures Subscribe: every ConsumerOption, a
// ConnOption, a TraceOption, and the options of the subscription's own loop (WithWorkers, WithPullBatch,
// WithPullWait). Those are not PullerOptions, so giving one to NewPuller
// does not compile.
type SubscribeOption interface {
	applySubscribe(*subscribeOptions)
}

// subscribeOptions configure a Subscription.
type subscribeOptions struct {
	consumerOptions
	workers     int
	pullBatch   int
	pullWait    time.Duration
	heartbeat   time.Duration
	ackInterval time.Duration // acks and nacks are sent in batches at most this often
}

func defaultSubscribeOptions() subscribeOptions {
	return subscribeOptions{consumerOptions: defaultConsumerOptions(),
		workers: 4, pullBatch: 64, pullWait: 5 * time.Second,
		heartbeat: 5 * time.Second, ackInterval: 50 * time.Millisecond}
}

// subscribeOption sets what only a Subscription has.
type subscribeOption func(*subscribeOptions)

func (f subscribeOption) applySubscribe(o *subscribeOptions) { f(o) }

// WithWorkers sets how many handlers of a subscription run at once (QMQ's
// executor). Default 4.
func WithWorkers(n int) SubscribeOption {
	return subscribeOption(func(o *subscribeOptions) { o.workers = n })
}

// WithPullBatch caps the messages one pull of a subscription fetches
// (1 to 10,000). Default 64. A subscription pulls no more than its
// workers (WithWorkers) can start soon: one per free worker, and as many
// more as they are expected to start within 250 ms by the handlers'
// recent times, spread over the subject's broker groups; so that a
// message's ack wait (the group's, 30 s by default, counted from the
// pull) goes to its handler, not to waiting in the client.
func WithPullBatch(n int) SubscribeOption {
	return subscribeOption(func(o *subscribeOptions) { o.pullBatch = n })
}

// WithPullWait sets how long one pull of a subscription waits for
// messages (more than 0, at most an hour; brokers cap it at their own
// maximum). Default 5 s. Drain and Close wait up to this long, and 10 s
// more, for the pulls under way.
func WithPullWait(d time.Duration) SubscribeOption {
	return subscribeOption(func(o *subscribeOptions) { o.pullWait = d })
}
