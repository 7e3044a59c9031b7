package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server"
)

// errInvalidFlag is wrapped by the errors about a flag's value that qmqd
// refuses before it starts anything.
var errInvalidFlag = errors.New("invalid")

// maxMiB is the largest --retention-size: limits.MaxRetentionBytes.
const maxMiB = limits.MaxRetentionBytes >> 20

// seeds is how the flags that seed a new broker group's configuration end
// their help.
const seeds = "Seeds a new broker group's configuration, which its first leader proposes; a group that has one " +
	"keeps it whatever its nodes' flags (qmqctl config set changes it)"

// retentionFlags set what a broker group removes, and when: the seed of
// its configuration's retention.
func retentionFlags() []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "retention-age", Value: server.DefaultRetentionAge, DefaultText: "168h",
			Usage: "remove messages older than `DUR`, a whole segment once all of it is (0: never by age; else at least " +
				"the dedup window). The default, a week, leaves time to repair a consumer group broken over a long " +
				"weekend before what it has not read goes. " + seeds},
		&cli.Int64Flag{Name: "retention-size", Value: 0,
			Usage: "remove the oldest segments while the group's message log holds more than `MIB` MiB (0: no size bound, " +
				"the default, since --min-free-disk already refuses sends before the disk fills, which loses nothing, where " +
				"a size bound deletes messages consumers may not have read; else at least one segment). " + seeds},
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
	case age > limits.MaxRetentionAge:
		return fmt.Errorf("%w --retention-age %s: above %s", errInvalidFlag, age, limits.MaxRetentionAge)
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
