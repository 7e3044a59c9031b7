package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server"
)

// errInvalidFlag is wrapped by the errors about a flag's value that qmqd
// refuses before it starts anything.
var errInvalidFlag = errors.New("invalid")

// maxMiB is the largest count of MiB whose byte count fits an int64.
const maxMiB = math.MaxInt64 >> 20

// retentionFlags set what a broker group removes, and when. Apply decides
// with them: every node of a group must have the same values.
func retentionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retention-age", Value: server.DefaultRetentionAge, DefaultText: "168h",
			Usage: "remove messages older than `DUR`, a whole segment once all of it is (0: never by age; else at least " +
				"the 10m dedup window). The default, a week, leaves time to repair a consumer group broken over a long " +
				"weekend before what it has not read goes. The same on every node of the group"},
		&cli.Int64Flag{Name: "retention-size", Value: 0,
			Usage: "remove the oldest segments while the group's message log holds more than `MIB` MiB (0: no size bound, " +
				"the default, since --min-free-disk already refuses sends before the disk fills, which loses nothing, where " +
				"a size bound deletes messages consumers may not have read; else at least one 64 MiB segment). The same on " +
				"every node of the group"},
	}
}

// retentionSettings applies retentionFlags to cfg, refusing values that
// cannot work with the flag named: negative ones, an age under cfg's dedup
// window, a size under one of its message-log segments or too large to
// count in bytes.
func retentionSettings(c *cli.Context, cfg *server.Config) error {
	age, mib := c.Duration("retention-age"), c.Int64("retention-size")
	dedup, segment := cfg.FSM.DedupWindow, cfg.FSM.SegmentSize
	const disables = "0 disables it"
	switch {
	case age < 0:
		return fmt.Errorf("%w --retention-age %s: negative; %s", errInvalidFlag, age, disables)
	case age > 0 && age < dedup:
		return fmt.Errorf("%w --retention-age %s: below the %s dedup window, a send retried after its message was removed would be stored twice; %s",
			errInvalidFlag, age, dedup, disables)
	case mib < 0:
		return fmt.Errorf("%w --retention-size %d: negative; %s", errInvalidFlag, mib, disables)
	case mib > maxMiB:
		return fmt.Errorf("%w --retention-size %d: above %d MiB", errInvalidFlag, mib, int64(maxMiB))
	case mib > 0 && mib<<20 < segment:
		return fmt.Errorf("%w --retention-size %d: below one message-log segment (%d MiB); %s", errInvalidFlag, mib, segment>>20, disables)
	}
	// Round a fraction of a millisecond up, so that no positive age becomes
	// 0, which disables the bound.
	ms := age.Milliseconds()
	if age%time.Millisecond != 0 {
		ms++
	}
	cfg.FSM.Retention = logs.Retention{MaxAge: ms, MaxBytes: mib << 20}
	return nil
}
