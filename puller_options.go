package qmq

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/transport"
)

// PullerOption configures NewPuller. The options that configure a Puller
// are ConsumerOptions: WithConsumerName, WithLogger, StartAt, StartAtTime,
// WithTags, WithAllTags, WithAtMostOnce and WithBroadcast; a ConnOption
// (WithTLS, WithTLSConfig, WithApp); and a TraceOption
// (WithTracerProvider, WithPropagator).
type PullerOption interface {
	applyPuller(*pullerOptions)
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
	tracing    tracing       // how it makes spans (TraceOptions)
}

// pullerOptions configure a Puller.
type pullerOptions struct {
	consumerOptions
}

func defaultConsumerOptions() consumerOptions {
	return consumerOptions{name: defaultConsumerName(), logger: slog.Default()}
}

// defaultConsumerName is a name unique to a Puller or a Subscription: its
// host, process id and a random suffix.
func defaultConsumerName() string {
	host, err := os.Hostname()
	if err != nil || limits.CheckName("consumer", host) != nil {
		host = "host"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(4))
}

func defaultPullerOptions() pullerOptions {
	return pullerOptions{consumerOptions: defaultConsumerOptions()}
}

// consumerOption sets what a Puller and a Subscription share.
type consumerOption func(*consumerOptions)

func (f consumerOption) applyPuller(o *pullerOptions)       { f(&o.consumerOptions) }
func (f consumerOption) applySubscribe(o *subscribeOptions) { f(&o.consumerOptions) }

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

// Position is where a consumer group starts when its first pull creates it.
type Position uint8

// Start positions: Latest is the default.
const (
	// Latest starts a new group with what is sent after its first pull,
	// as QMQ does.
	Latest Position = iota
	// Earliest starts a new group at the oldest message the broker keeps.
	Earliest
)

// StartAt sets where the consumer group starts if this consumer's pull
// creates it: Latest (the default) or Earliest. A group that exists
// keeps its position: a start position applies once, when the group is
// new (an operator moves an existing group with a reset).
func StartAt(p Position) ConsumerOption {
	return consumerOption(func(o *consumerOptions) {
		o.start, o.startAt = transport.StartLatest, time.Time{}
		if p == Earliest {
			o.start = transport.StartEarliest
		}
	})
}

// StartAtTime starts a consumer group that this consumer's pull creates
// at the first message stored at or after t (to the millisecond): what
// was stored before counts as consumed.
func StartAtTime(t time.Time) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.start, o.startAt = transport.StartAtTime, t })
}

// WithTags makes the consumer receive only the messages with at least one
// of tags (at most MaxTags, each 1 to MaxTagLen bytes). The
// broker filters: messages without them count as consumed by the group.
// It replaces an earlier WithTags or WithAllTags.
func WithTags(tags ...string) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.tags, o.tagsAll = tags, false })
}

// WithAllTags makes the consumer receive only the messages with every one
// of tags, within the same bounds as WithTags, which it replaces.
func WithAllTags(tags ...string) ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.tags, o.tagsAll = tags, true })
}

// WithAtMostOnce makes the group count each message as consumed as soon as
// it is handed to this consumer: it is never delivered again, whatever
// becomes of the consumer or its handler. Nothing is acknowledged, nacked
// or extended for such messages (Ack, Nack and InProgress do nothing).
func WithAtMostOnce() ConsumerOption {
	return consumerOption(func(o *consumerOptions) { o.atMostOnce = true })
}

// DefaultBroadcastExpiry is how long a broadcast consumer's group outlives
// its consumer when WithBroadcast is given 0.
const DefaultBroadcastExpiry = time.Hour

// WithBroadcast makes every instance receive every message: the consumer
// consumes as a consumer group of its own, named "<group>.<consumer>"
// (which must keep to the naming rule and its 200-byte bound), that starts
// with what is sent after its first pull unless StartAt says otherwise.
// The broker forgets that group once it has had no consumer for expiry
// (DefaultBroadcastExpiry if 0; 1 s to two years): a restarted instance
// that reuses its consumer name (WithConsumerName) within that time goes
// on where it left off. The group is not recorded with the metaserver.
func WithBroadcast(expiry time.Duration) ConsumerOption {
	return consumerOption(func(o *consumerOptions) {
		o.broadcast = true
		o.idleExpiry = expiry
		if expiry == 0 {
			o.idleExpiry = DefaultBroadcastExpiry
		}
	})
}

// consumeGroup checks the options that shape how the consumer pulls, and
// returns the consumer group it pulls as: group, or for a broadcast
// consumer, a group of its own.
func (o *consumerOptions) consumeGroup(group string) (string, error) {
	if len(o.tags) > MaxTags {
		return "", fmt.Errorf("%w: %d tags (at most %d)", ErrInvalidOption, len(o.tags), MaxTags)
	}
	for _, t := range o.tags {
		if t == "" || len(t) > MaxTagLen {
			return "", fmt.Errorf("%w: tag length %d (1..%d)", ErrInvalidOption, len(t), MaxTagLen)
		}
	}
	if o.start == transport.StartAtTime && o.startAt.UnixMilli() < 0 {
		return "", fmt.Errorf("%w: start time %s is before 1970", ErrInvalidOption, o.startAt)
	}
	if !o.broadcast {
		return group, nil
	}
	if o.idleExpiry < limits.MinIdleExpiry || o.idleExpiry > limits.MaxIdleExpiry {
		return "", fmt.Errorf("%w: broadcast expiry %s (0 for %s, or %s..%s)", ErrInvalidOption,
			o.idleExpiry, DefaultBroadcastExpiry, limits.MinIdleExpiry, limits.MaxIdleExpiry)
	}
	own := group + "." + o.name
	if err := limits.CheckName("broadcast group", own); err != nil {
		return "", fmt.Errorf("%w: %w (the group and the consumer name joined by '.')", ErrInvalidOption, err)
	}
	return own, nil
}
