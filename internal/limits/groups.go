package limits

import "time"

// A consumer group's settings: a new group's defaults and the bounds the
// state machine checks a SetGroup command against. qmqctl checks its
// flags and the SDK its broadcast expiry against the same bounds before
// anything is sent, and print the defaults from here.
const (
	// DefaultMaxDeliveries is how many times a new group hands a message
	// out before it becomes a dead letter (QMQ's figure).
	DefaultMaxDeliveries = 32
	// DefaultRetryFirst is a new group's wait before the first redelivery
	// of a failed message; each later wait doubles, up to DefaultRetryMax.
	// With DefaultMaxDeliveries, a message is given up on after about 6
	// hours.
	DefaultRetryFirst = 5 * time.Second
	// DefaultRetryMax is a new group's longest wait before a redelivery.
	DefaultRetryMax = 15 * time.Minute
	// DefaultAckWait is how long a new group lets a message handed out
	// stay unacked before handing it out again.
	DefaultAckWait = 30 * time.Second

	// MaxDeliveries bounds a group's max deliveries (at least 1: the first
	// failure makes a dead letter).
	MaxDeliveries = 10000
	// MaxRetryDelay bounds a group's retry backoff (first and longest
	// wait), and how far ahead a nack may set a retry time.
	MaxRetryDelay = DefaultMaxDelay
	// MinAckWait and MaxAckWait bound a group's ack wait unless it is 0
	// (no limit).
	MinAckWait = time.Second
	MaxAckWait = 7 * 24 * time.Hour
	// MaxInFlight bounds a group's max in flight, the unacked messages one
	// of its consumers may hold (0 for the broker's default, which also
	// caps it): ten of the largest pulls.
	MaxInFlight = MaxPullMessages * 10
	// MinIdleExpiry and MaxIdleExpiry bound a group's idle expiry unless it
	// is 0 (never); a broadcast consumer's group is forgotten within them.
	MinIdleExpiry = time.Second
	MaxIdleExpiry = DefaultMaxDelay
)

// A new group's defaults are within the bounds: the build fails otherwise
// (a negative constant does not convert to uint).
const (
	_ = uint(MaxDeliveries - DefaultMaxDeliveries)
	_ = uint(DefaultMaxDeliveries - 1)
	_ = uint(MaxRetryDelay - DefaultRetryMax)
	_ = uint(DefaultRetryMax - DefaultRetryFirst)
	_ = uint(MaxAckWait - DefaultAckWait)
	_ = uint(DefaultAckWait - MinAckWait)
	_ = uint(MaxIdleExpiry - MinIdleExpiry)
)

// MaxDeadLetterPage bounds the dead letters one broker group lists in one
// answer: the broker answers at most this many, and qmqctl refuses a
// --limit over it.
const MaxDeadLetterPage = 1000
