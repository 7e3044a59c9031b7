package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/limits"
)

// The flags of `group set` and their bounds, checked before anything is
// sent. The bounds are the broker's (a test holds them to its check).
const (
	maxDeliveriesLimit = 10000
	maxRetryDelay      = limits.DefaultMaxDelay
	minAckWait         = time.Second
	maxAckWait         = 7 * 24 * time.Hour
	maxInFlightLimit   = limits.MaxPullMessages * 10
	minIdleExpiry      = time.Second
	maxIdleExpiry      = limits.DefaultMaxDelay
)

func settingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "max-deliveries", Usage: fmt.Sprintf("hand a message out at most `N` times (1..%d); 1 makes the first failure a dead letter", maxDeliveriesLimit), DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "retry-first", Usage: "wait `D` before the first redelivery of a failed message (0 to at most --retry-max)", DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "retry-max", Usage: "the longest wait `D` before a redelivery (at most 17544h, two years)", DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "ack-wait", Usage: "give an unacked message back to the group after `D` (0 for never, or 1s..168h)", DefaultText: "unchanged"},
		&cli.Int64Flag{Name: "max-in-flight", Usage: fmt.Sprintf("each consumer holds at most `N` unacked messages (0 for the broker's default, at most %d)", maxInFlightLimit), DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "idle-expiry", Usage: "forget the group after `D` with no consumer (0 for never, or 1s..17544h)", DefaultText: "unchanged"},
	}
}

// changesFromFlags reads and checks the setting flags given.
func changesFromFlags(c *cli.Context) (qmq.ConsumerGroupChanges, error) {
	var ch qmq.ConsumerGroupChanges
	if c.IsSet("max-deliveries") {
		n := c.Int64("max-deliveries")
		if n < 1 || n > maxDeliveriesLimit {
			return ch, fmt.Errorf("--max-deliveries %d: 1..%d", n, maxDeliveriesLimit)
		}
		v := uint32(n)
		ch.MaxDeliveries = &v
	}
	if c.IsSet("max-in-flight") {
		n := c.Int64("max-in-flight")
		if n < 0 || n > maxInFlightLimit {
			return ch, fmt.Errorf("--max-in-flight %d: 0 for the broker's default, or at most %d", n, maxInFlightLimit)
		}
		v := uint32(n)
		ch.MaxInFlight = &v
	}
	for _, d := range []struct {
		name     string
		to       **time.Duration
		min, max time.Duration
		zero     string // what 0 means when min > 0
	}{
		{"retry-first", &ch.RetryFirst, 0, maxRetryDelay, ""},
		{"retry-max", &ch.RetryMax, 0, maxRetryDelay, ""},
		{"ack-wait", &ch.AckWait, minAckWait, maxAckWait, "0 for none"},
		{"idle-expiry", &ch.IdleExpiry, minIdleExpiry, maxIdleExpiry, "0 for never"},
	} {
		if !c.IsSet(d.name) {
			continue
		}
		v := c.Duration(d.name)
		if err := checkDuration(d.name, v, d.min, d.max, d.zero); err != nil {
			return ch, err
		}
		*d.to = &v
	}
	if ch.RetryFirst != nil && ch.RetryMax != nil && *ch.RetryFirst > *ch.RetryMax {
		return ch, fmt.Errorf("--retry-first %s is longer than --retry-max %s", *ch.RetryFirst, *ch.RetryMax)
	}
	return ch, nil
}

// checkDuration checks a setting's duration: whole milliseconds (what the
// broker keeps), 0 or within min..max.
func checkDuration(name string, v, min, max time.Duration, zero string) error {
	bounds := fmt.Sprintf("%s..%s", min, max)
	if zero != "" {
		bounds = zero + ", or " + bounds
	}
	switch {
	case v%time.Millisecond != 0:
		return fmt.Errorf("--%s %s: not a whole number of milliseconds", name, v)
	case v == 0 && zero != "":
		return nil
	case v < min || v > max:
		return fmt.Errorf("--%s %s: %s", name, v, bounds)
	}
	return nil
}
