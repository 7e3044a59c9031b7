package qmq

import "time"

// ProducerOption configures a Producer: WithBatchSize, WithMaxInflight,
// WithSendTimeout, WithMaxDelay, a ConnOption (WithTLS, WithTLSConfig,
// WithApp) and a TraceOption (WithTracerProvider, WithPropagator).
type ProducerOption interface {
	applyProducer(*producerOptions)
}

// producerOption sets what only a Producer has.
type producerOption func(*producerOptions)

func (f producerOption) applyProducer(o *producerOptions) { f(o) }

// producerOptions configure a Producer.
type producerOptions struct {
	maxBatch    int
	maxInflight int
	sendTimeout time.Duration
	maxDelay    time.Duration
	now         func() time.Time
	conn        connection
	tracing     tracing
}

// WithBatchSize caps how many messages one send request carries.
// Default 1,000.
func WithBatchSize(n int) ProducerOption {
	return producerOption(func(o *producerOptions) { o.maxBatch = n })
}

// WithMaxInflight caps how many send requests may await their answer at
// once. Default 8.
func WithMaxInflight(n int) ProducerOption {
	return producerOption(func(o *producerOptions) { o.maxInflight = n })
}

// WithSendTimeout bounds an asynchronous send, retries included, and a
// synchronous send whose context has no deadline. Default 30 s.
func WithSendTimeout(d time.Duration) ProducerOption {
	return producerOption(func(o *producerOptions) { o.sendTimeout = d })
}

// DefaultMaxDelay is two years (731 days): how far ahead a message may be
// scheduled unless WithMaxDelay says otherwise. Brokers have the same
// default (qmqd --max-delay).
const DefaultMaxDelay = 731 * 24 * time.Hour

// WithMaxDelay sets how far ahead a message may be scheduled; a send
// beyond it fails with ErrDelayTooLong before reaching a broker. Brokers
// enforce their own maximum too. Default DefaultMaxDelay.
func WithMaxDelay(d time.Duration) ProducerOption {
	return producerOption(func(o *producerOptions) { o.maxDelay = d })
}
