package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
)

// The flags of `group set`, checked before anything is sent against the
// bounds the broker applies (those of internal/limits).
func settingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.Int64Flag{Name: "max-deliveries", Usage: fmt.Sprintf("hand a message out at most `N` times (1..%d); 1 makes the first failure a dead letter", limits.MaxDeliveries), DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "retry-first", Usage: "wait `D` before the first redelivery of a failed message (0 to at most --retry-max)", DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "retry-max", Usage: fmt.Sprintf("the longest wait `D` before a redelivery (at most %s, two years)", shortDuration(limits.MaxRetryDelay)), DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "ack-wait", Usage: fmt.Sprintf("give an unacked message back to the group after `D` (0 for never, or %s..%s)", shortDuration(limits.MinAckWait), shortDuration(limits.MaxAckWait)), DefaultText: "unchanged"},
		&cli.Int64Flag{Name: "max-in-flight", Usage: fmt.Sprintf("each consumer holds at most `N` unacked messages (0 for the broker's default, at most %d)", limits.MaxInFlight), DefaultText: "unchanged"},
		&cli.DurationFlag{Name: "idle-expiry", Usage: fmt.Sprintf("forget the group after `D` with no consumer (0 for never, or %s..%s)", shortDuration(limits.MinIdleExpiry), shortDuration(limits.MaxIdleExpiry)), DefaultText: "unchanged"},
	}
}

// shortDuration writes d as time.Duration does, less its trailing zero
// units: 17544h, 15m, 30s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// changesFromFlags reads and checks the setting flags given.
func changesFromFlags(c *cli.Context) (admin.ConsumerGroupChanges, error) {
	var ch admin.ConsumerGroupChanges
	if c.IsSet("max-deliveries") {
		n := c.Int64("max-deliveries")
		if n < 1 || n > limits.MaxDeliveries {
			return ch, fmt.Errorf("--max-deliveries %d: 1..%d", n, limits.MaxDeliveries)
		}
		v := uint32(n)
		ch.MaxDeliveries = &v
	}
	if c.IsSet("max-in-flight") {
		n := c.Int64("max-in-flight")
		if n < 0 || n > limits.MaxInFlight {
			return ch, fmt.Errorf("--max-in-flight %d: 0 for the broker's default, or at most %d", n, limits.MaxInFlight)
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
		{"retry-first", &ch.RetryFirst, 0, limits.MaxRetryDelay, ""},
		{"retry-max", &ch.RetryMax, 0, limits.MaxRetryDelay, ""},
		{"ack-wait", &ch.AckWait, limits.MinAckWait, limits.MaxAckWait, "0 for none"},
		{"idle-expiry", &ch.IdleExpiry, limits.MinIdleExpiry, limits.MaxIdleExpiry, "0 for never"},
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
