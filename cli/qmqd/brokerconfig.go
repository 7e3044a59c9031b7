package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/server"
)

// configFlags seed the rest of a new broker group's configuration
// (retentionFlags seed its retention): the dedup window, the pull and
// unacked bounds and the segment sizes.
func configFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "dedup-window", Value: limits.DefaultDedupWindow, DefaultText: "10m",
			Usage: fmt.Sprintf("remember a message id for `DUR`, so that a send retried within it is not stored twice (0 to %s). ", limits.MaxDedupWindow) + seeds},
		&cli.IntFlag{Name: "max-pull", Value: limits.DefaultMaxPull,
			Usage: fmt.Sprintf("hand out at most `N` messages in one pull (1..%d). ", limits.MaxMaxPull) + seeds},
		&cli.IntFlag{Name: "max-unacked", Value: limits.DefaultMaxUnacked,
			Usage: fmt.Sprintf("let one consumer hold at most `N` messages unacked (1..%d). ", limits.MaxMaxUnacked) + seeds},
		&cli.Int64Flag{Name: "segment-size", Value: limits.DefaultSegmentSize >> 20,
			Usage: fmt.Sprintf("roll the message log's segments at `MIB` MiB (%d..%d): what retention removes at a time. ",
				limits.MinSegmentSize>>20, limits.MaxSegmentSize>>20) + seeds},
		&cli.Int64Flag{Name: "index-segment-size", Value: limits.DefaultIndexSegmentSize >> 10,
			Usage: fmt.Sprintf("roll the consume and pull logs' segments at `KIB` KiB (%d..%d). ",
				limits.MinIndexSegmentSize>>10, limits.MaxIndexSegmentSize>>10) + seeds},
	}
}

// configSettings applies configFlags to cfg, refusing values outside the
// bounds of internal/limits with the flag named.
func configSettings(c *cli.Context, cfg *server.Config) error {
	window := c.Duration("dedup-window")
	if window < 0 || window > limits.MaxDedupWindow || window%time.Millisecond != 0 {
		return fmt.Errorf("%w --dedup-window %s: whole milliseconds, 0 to %s", errInvalidFlag, window, limits.MaxDedupWindow)
	}
	for _, n := range []struct {
		name string
		max  int
		to   *int
	}{{"max-pull", limits.MaxMaxPull, &cfg.FSM.MaxPull}, {"max-unacked", limits.MaxMaxUnacked, &cfg.FSM.MaxUnacked}} {
		v := c.Int(n.name)
		if v < 1 || v > n.max {
			return fmt.Errorf("%w --%s %d: 1..%d", errInvalidFlag, n.name, v, n.max)
		}
		*n.to = v
	}
	for _, s := range []struct {
		name     string
		shift    uint
		unit     string
		min, max int64
		to       *int64
	}{
		{"segment-size", 20, "MiB", limits.MinSegmentSize, limits.MaxSegmentSize, &cfg.FSM.SegmentSize},
		{"index-segment-size", 10, "KiB", limits.MinIndexSegmentSize, limits.MaxIndexSegmentSize, &cfg.FSM.IndexSegmentSize},
	} {
		v := c.Int64(s.name)
		if v < s.min>>s.shift || v > s.max>>s.shift {
			return fmt.Errorf("%w --%s %d: %d..%d %s", errInvalidFlag, s.name, v, s.min>>s.shift, s.max>>s.shift, s.unit)
		}
		*s.to = v << s.shift
	}
	cfg.FSM.DedupWindow = window
	return nil
}
