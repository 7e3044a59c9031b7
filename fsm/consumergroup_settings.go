package fsm

import (
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
)

// ConsumerGroupSettings is how a consumer group consumes. Every replica holds the
// group's settings in its replicated state: a group is created with
// DefaultConsumerGroupSettings and changed by a SetGroup command, so that every
// replica retries, times out and dead-letters alike.
type ConsumerGroupSettings struct {
	// MaxDeliveries is how many times a message is handed to the group
	// before it becomes a dead letter instead of being retried (QMQ's
	// figure, 32, by default; 1 dead-letters on the first failure).
	MaxDeliveries uint32
	// RetryFirst is how long after a failed delivery the message comes
	// back, the first time; each later retry waits twice as long as the one
	// before, up to RetryMax. Milliseconds.
	RetryFirst, RetryMax int64
	// AckWait is how long a message handed out may stay unacked before it
	// is handed to the group again, even while its consumer lives; 0 for
	// no limit. Milliseconds.
	AckWait int64
	// MaxInFlight bounds the messages one consumer of the group holds
	// unacked; 0 for the broker's default (Config.MaxUnacked, which also
	// caps it).
	MaxInFlight uint32
	// IdleExpiry forgets the group once it has had no consumer for this
	// long (broadcast consumers each have a group of their own); 0 never.
	// Milliseconds.
	IdleExpiry int64
}

// DefaultConsumerGroupSettings are a new group's settings: QMQ's retry policy
// (limits.DefaultMaxDeliveries deliveries, 32; the first retry after
// limits.DefaultRetryFirst, 5 s, doubling to at most limits.DefaultRetryMax,
// 15 minutes, so a message is given up on after about 6 hours) and an ack
// wait of limits.DefaultAckWait, 30 s.
func DefaultConsumerGroupSettings() ConsumerGroupSettings {
	return ConsumerGroupSettings{
		MaxDeliveries: limits.DefaultMaxDeliveries,
		RetryFirst:    limits.DefaultRetryFirst.Milliseconds(),
		RetryMax:      limits.DefaultRetryMax.Milliseconds(),
		AckWait:       limits.DefaultAckWait.Milliseconds(),
	}
}

// The bounds of the settings (those of internal/limits) in milliseconds,
// the unit the settings are kept in.
const (
	maxRetryDelay = int64(limits.MaxRetryDelay / time.Millisecond)
	minAckWait    = int64(limits.MinAckWait / time.Millisecond)
	maxAckWait    = int64(limits.MaxAckWait / time.Millisecond)
	minIdleExpiry = int64(limits.MinIdleExpiry / time.Millisecond)
	maxIdleExpiry = int64(limits.MaxIdleExpiry / time.Millisecond)
)

// Check reports whether the settings are within their bounds.
func (s ConsumerGroupSettings) Check() error {
	switch {
	case s.MaxDeliveries < 1 || s.MaxDeliveries > limits.MaxDeliveries:
		return fmt.Errorf("%w: max deliveries %d (1..%d)", ErrInvalid, s.MaxDeliveries, limits.MaxDeliveries)
	case s.RetryFirst < 0 || s.RetryMax < s.RetryFirst || s.RetryMax > maxRetryDelay:
		return fmt.Errorf("%w: retry backoff %s to %s (0 <= first <= max <= %s)", ErrInvalid,
			millis(s.RetryFirst), millis(s.RetryMax), millis(maxRetryDelay))
	case s.AckWait != 0 && (s.AckWait < minAckWait || s.AckWait > maxAckWait):
		return fmt.Errorf("%w: ack wait %s (0 for none, or %s..%s)", ErrInvalid, millis(s.AckWait), millis(minAckWait), millis(maxAckWait))
	case s.MaxInFlight > limits.MaxInFlight:
		return fmt.Errorf("%w: max in flight %d (0 for the broker's default, at most %d)", ErrInvalid, s.MaxInFlight, limits.MaxInFlight)
	}
	return checkIdleExpiry(s.IdleExpiry)
}

// checkIdleExpiry reports whether an idle expiry (milliseconds) is within
// its bounds: a group's setting, or what a pull creating a group asks for.
func checkIdleExpiry(ms int64) error {
	if ms != 0 && (ms < minIdleExpiry || ms > maxIdleExpiry) {
		return fmt.Errorf("%w: idle expiry %s (0 for never, or %s..%s)", ErrInvalid, millis(ms), millis(minIdleExpiry), millis(maxIdleExpiry))
	}
	return nil
}

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }

// retryDelay is how long a message waits before its retry after its
// deliveries-th delivery failed: RetryFirst, doubling each time, capped.
func (s ConsumerGroupSettings) retryDelay(deliveries uint32) int64 {
	d := s.RetryFirst
	for i := uint32(1); i < deliveries && d > 0 && d < s.RetryMax; i++ {
		d *= 2
	}
	return min(d, s.RetryMax)
}

// inFlight returns how many unacked entries one consumer may hold.
func (s ConsumerGroupSettings) inFlight(brokerMax int) int {
	if s.MaxInFlight == 0 {
		return brokerMax
	}
	return min(int(s.MaxInFlight), brokerMax)
}

// StartPosition says where a new group starts in its subject, or where a
// reset moves it.
type StartPosition uint8

// Start positions. Latest is a new group's default, as in QMQ: a group
// receives what is sent after it first pulls.
const (
	StartLatest   StartPosition = 0
	StartEarliest StartPosition = 1
	StartAtTime   StartPosition = 2 // the first message appended at or after a time
)

func (p StartPosition) String() string {
	switch p {
	case StartLatest:
		return "latest"
	case StartEarliest:
		return "earliest"
	case StartAtTime:
		return "time"
	}
	return fmt.Sprintf("start(%d)", uint8(p))
}

func (p StartPosition) check() error {
	if p > StartAtTime {
		return fmt.Errorf("%w: unknown start position %d", ErrInvalid, p)
	}
	return nil
}
