package qmq

import (
	"log/slog"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// PullerOption configures NewPuller. The options that configure a Puller
// are ConsumerOptions: WithConsumerName, WithLogger, StartAt, StartAtTime,
// WithTags, WithAllTags, WithAtMostOnce and WithBroadcast; and a
// ConnOption (WithTLS, WithTLSConfig).
type PullerOption interface {
	applyPuller(*pullerOptions)
}

// SubscribeOption configures Subscribe: every ConsumerOption, a
// ConnOption, and the options of the subscription's own loop (WithWorkers, WithPullBatch,
// WithPullWait). Those are not PullerOptions, so giving one to NewPuller
// does not compile.
type SubscribeOption interface {
	applySubscribe(*subscribeOptions)
}

// ConsumerOption configures both NewPuller and Subscribe.
type ConsumerOption interface {
	PullerOption
	SubscribeOption
}

// consumerOptions are what a Puller and a Subscription both have.
type consumerOptions struct {
	name       string
	logger     *slog.Logger
	start      transport.StartPosition // where a group this consumer creates starts
	startAt    time.Time               // with transport.StartAtTime
	tags       []string                // only messages with any of them (every one, with tagsAll)
	tagsAll    bool
	atMostOnce bool
	broadcast  bool          // a consumer group of its own
	idleExpiry time.Duration // a broadcast group is forgotten after this long without its consumer
	conn       connection    // how it connects (ConnOptions)
}

// pullerOptions configure a Puller.
type pullerOptions struct {
	consumerOptions
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

func defaultConsumerOptions() consumerOptions {
	return consumerOptions{name: defaultConsumerName(), logger: slog.Default()}
}

func defaultPullerOptions() pullerOptions {
	return pullerOptions{consumerOptions: defaultConsumerOptions()}
}

func defaultSubscribeOptions() subscribeOptions {
	return subscribeOptions{consumerOptions: defaultConsumerOptions(),
		workers: 4, pullBatch: 64, pullWait: 5 * time.Second,
		heartbeat: 5 * time.Second, ackInterval: 50 * time.Millisecond}
}

// consumerOption sets what a Puller and a Subscription share.
type consumerOption func(*consumerOptions)

func (f consumerOption) applyPuller(o *pullerOptions)       { f(&o.consumerOptions) }
func (f consumerOption) applySubscribe(o *subscribeOptions) { f(&o.consumerOptions) }

// subscribeOption sets what only a Subscription has.
type subscribeOption func(*subscribeOptions)

func (f subscribeOption) applySubscribe(o *subscribeOptions) { f(o) }

// WithConsumerName sets the consumer's name within its group. Default: a
// name unique to the Puller or subscription (host, process id, random
// suffix). A restarted process that reuses its name takes over what its
// earlier life left unacknowledged.
func WithConsumerName(name string) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.name = name })
}

// WithLogger sets where the Puller or subscription reports what its caller
// is not returned: a broker group whose pulls started failing (and when
// they work again), pulled messages a Close leaves to come again, and for a
// subscription, handler and ack failures. Default slog.Default(); nil
// discards.
func WithLogger(l *slog.Logger) ConsumerOption {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return consumerOption(func(o *consumerOptions) { o.logger = l })
}

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
