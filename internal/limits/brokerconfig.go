package limits

import "time"

// A broker group's configuration: the settings that decide what its state
// machine applies (retention, the dedup window, the pull and unacked
// bounds, the segment sizes). They are replicated state, changed by a
// command that the leader checks before proposing and apply checks again,
// against these bounds; qmqctl checks its flags against them before
// anything is sent and prints the defaults from here.
const (
	// DefaultSegmentSize is a new group's message-log segment size.
	DefaultSegmentSize = 64 << 20
	// MinSegmentSize and MaxSegmentSize bound it: a segment is the unit
	// retention removes and a snapshot links.
	MinSegmentSize = 1 << 20
	MaxSegmentSize = 1 << 30

	// DefaultIndexSegmentSize is a new group's segment size of the consume
	// and pull logs and the journal; MinIndexSegmentSize and
	// MaxIndexSegmentSize bound it.
	DefaultIndexSegmentSize = 4 << 20
	MinIndexSegmentSize     = 64 << 10
	MaxIndexSegmentSize     = 256 << 20

	// DefaultDedupWindow is how long a new group remembers a message id,
	// so that a send retried with it is not stored twice.
	DefaultDedupWindow = 10 * time.Minute
	// MaxDedupWindow bounds the window (0 remembers nothing). The window
	// costs every replica 12 bytes an id, and a schedule hour is removed
	// once the window of its last append has passed: with two windows of
	// at most half an hour (the one an append saw and the one the hour is
	// swept by, which a change may make different) no lookup reads an
	// hour already removed.
	MaxDedupWindow = 30 * time.Minute

	// DefaultMaxPull caps one pull of a new group; MaxMaxPull bounds the
	// setting (at least 1): what one pull may ask for.
	DefaultMaxPull = 1000
	MaxMaxPull     = MaxPullMessages

	// DefaultMaxUnacked is the most entries one consumer of a new group
	// holds unacked; MaxMaxUnacked bounds the setting (at least 1), as
	// MaxInFlight bounds a consumer group's own cap under it.
	DefaultMaxUnacked = 10000
	MaxMaxUnacked     = MaxInFlight

	// MaxRetentionAge bounds the retention age (0: no age bound; else at
	// least the dedup window); MaxRetentionBytes the retention size (0: no
	// size bound; else at least one message-log segment).
	MaxRetentionAge   = 20 * 366 * 24 * time.Hour
	MaxRetentionBytes = 1 << 60
)

// A new group's defaults are within the bounds: the build fails otherwise
// (a negative constant does not convert to uint).
const (
	_ = uint(MaxSegmentSize - DefaultSegmentSize)
	_ = uint(DefaultSegmentSize - MinSegmentSize)
	_ = uint(MaxIndexSegmentSize - DefaultIndexSegmentSize)
	_ = uint(DefaultIndexSegmentSize - MinIndexSegmentSize)
	_ = uint(MaxDedupWindow - DefaultDedupWindow)
	_ = uint(MaxMaxPull - DefaultMaxPull)
	_ = uint(MaxMaxUnacked - DefaultMaxUnacked)
	_ = uint(MaxRetentionAge - MaxDedupWindow)
	_ = uint(MaxRetentionBytes - MaxSegmentSize)
)
