package server

import (
	"github.com/qmqgo/qmq/internal/version"

	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// MetaConfig configures a metaserver node. Start from DefaultMetaConfig.
type MetaConfig struct {
	// NodeConfig is the node's id, data directory, addresses and bootstrap
	// flag, within the metaserver group.
	NodeConfig

	// SubjectGroups is how many broker groups a subject is assigned to on
	// its first use (fewer if fewer are available). Default 2.
	SubjectGroups int
	// GroupTimeout is how long a broker group's leader may go without a
	// heartbeat before the group is marked unavailable. Default 10 s.
	GroupTimeout time.Duration
	// ApplyTimeout bounds one Raft proposal. Default 10 s.
	ApplyTimeout time.Duration
	// Raft timing. Defaults: heartbeat and election 1 s, lease 500 ms,
	// snapshot every 2 minutes or 1,024 entries, keeping 1,024.
	RaftTiming

	// Now is the clock heartbeats are timed by. Default time.Now.
	Now func() time.Time
	// Logger is the root logger.
	Logger hclog.Logger
	// MaxVersion, if set, is the newest version Number the node applies
	// and advertises, instead of its build's: a stand-in for a node of an
	// earlier release, in tests.
	MaxVersion version.Number
}

// DefaultMetaConfig returns a configuration with every default set.
func DefaultMetaConfig() MetaConfig {
	return MetaConfig{
		SubjectGroups: 2,
		GroupTimeout:  10 * time.Second,
		ApplyTimeout:  10 * time.Second,
		RaftTiming: RaftTiming{
			HeartbeatTimeout:  time.Second,
			ElectionTimeout:   time.Second,
			LeaderLease:       500 * time.Millisecond,
			SnapshotInterval:  2 * time.Minute,
			SnapshotThreshold: 1024,
			TrailingLogs:      1024,
		},
		Now:    time.Now,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "qmqd", Level: hclog.Info}),
	}
}

// Validate reports the first setting that cannot work.
func (c *MetaConfig) Validate() error {
	if err := c.NodeConfig.check("meta config"); err != nil {
		return err
	}
	switch {
	case c.SubjectGroups <= 0:
		return fmt.Errorf("server: meta config: subject groups %d must be positive", c.SubjectGroups)
	case c.GroupTimeout <= 0 || c.ApplyTimeout <= 0:
		return errors.New("server: meta config: timeouts must be positive")
	case c.Now == nil || c.Logger == nil:
		return errors.New("server: meta config: Now and Logger must be set")
	}
	return nil
}
