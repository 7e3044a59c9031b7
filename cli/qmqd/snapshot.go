package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/server"
)

// minSnapshotInterval is the shortest --snapshot-interval: Raft refuses
// one under 5 ms, and checking more often than ten times a second only
// costs.
const minSnapshotInterval = 100 * time.Millisecond

// snapshotFlags set when a broker node's Raft takes a snapshot, which is
// also when its state machine writes a checkpoint (its logs synced, its
// state recorded) and Raft compacts its log. The defaults suit a busy
// group; the chaos run lowers them on one group so that checkpoints, and
// the faults met at them, come every few seconds (docs/reliability.md).
func snapshotFlags() []cli.Flag {
	d := server.DefaultConfig()
	return []cli.Flag{
		&cli.DurationFlag{Name: "snapshot-interval", Value: d.SnapshotInterval,
			Usage: fmt.Sprintf("look every `DUR` to 2×DUR (at random) whether to take a Raft snapshot, the state machine's checkpoint (at least %s)", minSnapshotInterval)},
		&cli.Uint64Flag{Name: "snapshot-threshold", Value: d.SnapshotThreshold,
			Usage: "take one when at least `N` Raft entries came since the last (at least 1)"},
	}
}

// snapshotSettings applies snapshotFlags to cfg, refusing values Raft
// cannot work with, naming the flag.
func snapshotSettings(c *cli.Context, cfg *server.Config) error {
	interval, threshold := c.Duration("snapshot-interval"), c.Uint64("snapshot-threshold")
	if interval < minSnapshotInterval {
		return fmt.Errorf("%w --snapshot-interval %s: at least %s", errInvalidFlag, interval, minSnapshotInterval)
	}
	if threshold < 1 {
		return fmt.Errorf("%w --snapshot-threshold %d: at least 1", errInvalidFlag, threshold)
	}
	cfg.SnapshotInterval, cfg.SnapshotThreshold = interval, threshold
	return nil
}
