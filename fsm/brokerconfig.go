package fsm

import (
	"fmt"
	"math"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
)

// BrokerConfig is a broker group's configuration: the settings that decide
// what apply does. Every replica holds it in its replicated state and
// applies by it alone, so nodes started with different values of their own
// (Config) cannot apply the same entries differently. A SetBrokerConfig
// command changes it; its bounds are those of internal/limits, checked by
// Check, which the leader calls before proposing and apply again.
type BrokerConfig struct {
	// RetentionAge removes sealed message-log segments whose every message
	// is older, in milliseconds; 0 for no age bound, else at least the
	// dedup window. Default 0.
	RetentionAge int64
	// RetentionBytes removes the oldest sealed segments while the message
	// log holds more; 0 for no size bound, else at least one segment.
	// Default 0.
	RetentionBytes int64
	// DedupWindow is how long a message id is remembered, in milliseconds:
	// a send retried within it is acknowledged, not stored twice (0
	// remembers nothing). Default 10 minutes.
	DedupWindow int64
	// MaxPull caps one pull. Default 1,000.
	MaxPull int
	// MaxUnacked is the most entries one consumer holds unacked. Default
	// 10,000.
	MaxUnacked int
	// SegmentSize is the message log's segment size. Default 64 MiB.
	SegmentSize int64
	// IndexSegmentSize is the segment size of the consume and pull logs
	// and the journal. Default 4 MiB.
	IndexSegmentSize int64
}

// DefaultBrokerConfig is what a new group applies by until its first
// SetBrokerConfig: every replica agrees on it, whatever it was started
// with. It keeps every message (no retention), which removes nothing a
// later configuration might keep.
func DefaultBrokerConfig() BrokerConfig {
	return BrokerConfig{
		DedupWindow:      limits.DefaultDedupWindow.Milliseconds(),
		MaxPull:          limits.DefaultMaxPull,
		MaxUnacked:       limits.DefaultMaxUnacked,
		SegmentSize:      limits.DefaultSegmentSize,
		IndexSegmentSize: limits.DefaultIndexSegmentSize,
	}
}

// The bounds of internal/limits in milliseconds, the unit the
// configuration is kept in.
const (
	maxDedupWindow  = int64(limits.MaxDedupWindow / time.Millisecond)
	maxRetentionAge = int64(limits.MaxRetentionAge / time.Millisecond)
)

// Check reports a configuration outside its bounds, wrapping ErrInvalid:
// each value within its own (checkFields), a retention age not below the
// dedup window (a send retried after its message was removed would be
// stored twice), and a retention size not below one segment (it would
// remove every sealed segment as soon as it is sealed).
func (c BrokerConfig) Check() error {
	if err := c.checkFields(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch {
	case c.RetentionAge > 0 && c.RetentionAge < c.DedupWindow:
		return fmt.Errorf("%w: retention-age %s is below the dedup-window %s (0 for no age bound)", ErrInvalid,
			millis(c.RetentionAge), millis(c.DedupWindow))
	case c.RetentionBytes > 0 && c.RetentionBytes < c.SegmentSize:
		return fmt.Errorf("%w: retention-size %d bytes is below one message-log segment (segment-size %d; 0 for no size bound)", ErrInvalid,
			c.RetentionBytes, c.SegmentSize)
	}
	return nil
}

// checkFields reports a value outside its own bounds, whatever the others
// are: what a node's own values (Config) and a checkpoint must pass. The
// error wraps no sentinel; its callers give it theirs.
func (c BrokerConfig) checkFields() error {
	switch {
	case c.SegmentSize < limits.MinSegmentSize || c.SegmentSize > limits.MaxSegmentSize:
		return fmt.Errorf("segment-size %d bytes outside %d..%d", c.SegmentSize, limits.MinSegmentSize, limits.MaxSegmentSize)
	case c.IndexSegmentSize < limits.MinIndexSegmentSize || c.IndexSegmentSize > limits.MaxIndexSegmentSize:
		return fmt.Errorf("index-segment-size %d bytes outside %d..%d", c.IndexSegmentSize, limits.MinIndexSegmentSize, limits.MaxIndexSegmentSize)
	case c.DedupWindow < 0 || c.DedupWindow > maxDedupWindow:
		return fmt.Errorf("dedup-window %s outside 0..%s", millis(c.DedupWindow), limits.MaxDedupWindow)
	case c.MaxPull < 1 || c.MaxPull > limits.MaxMaxPull:
		return fmt.Errorf("max-pull %d outside 1..%d", c.MaxPull, limits.MaxMaxPull)
	case c.MaxUnacked < 1 || c.MaxUnacked > limits.MaxMaxUnacked:
		return fmt.Errorf("max-unacked %d outside 1..%d", c.MaxUnacked, limits.MaxMaxUnacked)
	case c.RetentionAge < 0 || c.RetentionAge > maxRetentionAge:
		return fmt.Errorf("retention-age %s outside 0..%s", millis(c.RetentionAge), limits.MaxRetentionAge)
	case c.RetentionBytes < 0 || c.RetentionBytes > limits.MaxRetentionBytes:
		return fmt.Errorf("retention-size %d bytes outside 0..%d", c.RetentionBytes, int64(limits.MaxRetentionBytes))
	}
	return nil
}

// retention is the retention policy of c.
func (c BrokerConfig) retention() logs.Retention {
	return logs.Retention{MaxAge: c.RetentionAge, MaxBytes: c.RetentionBytes}
}

// setting is one setting of a BrokerConfig, by the name operators use
// (qmqctl config set's flags, log keys), rendered for reading.
type setting struct{ name, value string }

// configNames are the settings' names, in the order of values, fields and
// ConfigBits.
var configNames = []string{"retention-age", "retention-size", "dedup-window", "max-pull", "max-unacked", "segment-size", "index-segment-size"}

// settings lists c's settings in that order.
func (c BrokerConfig) settings() []setting {
	values := []string{millis(c.RetentionAge).String(), fmt.Sprint(c.RetentionBytes), millis(c.DedupWindow).String(),
		fmt.Sprint(c.MaxPull), fmt.Sprint(c.MaxUnacked), fmt.Sprint(c.SegmentSize), fmt.Sprint(c.IndexSegmentSize)}
	out := make([]setting, len(values))
	for i, v := range values {
		out[i] = setting{configNames[i], v}
	}
	return out
}

// differences returns log key-value pairs naming each setting in which c
// and other differ, with both values (other's as "was").
func (c BrokerConfig) differences(other BrokerConfig, was string) []any {
	var out []any
	for i, o := range other.settings() {
		if s := c.settings()[i]; s.value != o.value {
			out = append(out, s.name, fmt.Sprintf("%s (%s %s)", s.value, was, o.value))
		}
	}
	return out
}

// ConfigSource says where the configuration a replica applies by comes
// from.
type ConfigSource uint8

// Configuration sources. The values are written into checkpoints: never
// renumber them.
const (
	// ConfigInitial: DefaultBrokerConfig, before the group's first
	// SetBrokerConfig. Only a checkpoint written by an earlier build of
	// this release holds it (an empty state then started so); an empty
	// state starts as ConfigNode now.
	ConfigInitial ConfigSource = 0
	// ConfigNode: the node's own values (Config), until the group's first
	// SetBrokerConfig: for a state written before the broker group
	// configuration existed (a checkpoint of version 4 or earlier), which
	// that node applied by, and for an empty state, which may be replaying
	// such a group's log from its first entry (a node joining it), or is a
	// new group's, which its first leader seeds before anything depends
	// on the configuration.
	ConfigNode ConfigSource = 1
	// ConfigGroup: set by a SetBrokerConfig command.
	ConfigGroup ConfigSource = 2
)

func (s ConfigSource) String() string {
	switch s {
	case ConfigInitial:
		return "initial"
	case ConfigNode:
		return "node"
	case ConfigGroup:
		return "broker-group"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// groupConfig is the configuration in the state, with where it comes from.
type groupConfig struct {
	BrokerConfig
	source ConfigSource
	index  uint64 // the entry that last set it (ConfigGroup)
	// dedupFloor is the leader-stamped time before which no delayed id is
	// remembered, whatever the window, and no message is scheduled: a
	// change that lengthened the window set it where the shorter one
	// ended, since ids it had forgotten are forgotten for good, and hours
	// it swept lie before it (math.MinInt64: none).
	dedupFloor int64
}

// check refuses a configuration no apply writes into a state at the
// applied index and time now: a source it is not written with (ConfigNode
// carries no values: they are the node's, filled in on load; ConfigInitial
// was set by no entry and is DefaultBrokerConfig, with no dedup floor;
// ConfigGroup was set by an entry at or before the applied one), values
// that do not pass Check, which apply held them to, or a dedup floor
// past the state's time.
func (c groupConfig) check(applied uint64, now int64) error {
	switch {
	case c.source == ConfigNode:
		return nil
	case c.source == ConfigInitial && (c.index != 0 || c != initialGroupConfig()):
		return fmt.Errorf("source %s set at entry %d, %+v, dedup floor %d", c.source, c.index, c.BrokerConfig, c.dedupFloor)
	case c.source == ConfigGroup && (c.index == 0 || c.index > applied), c.source > ConfigGroup:
		return fmt.Errorf("source %s set at entry %d, applied %d", c.source, c.index, applied)
	case c.dedupFloor != math.MinInt64 && c.dedupFloor > now:
		return fmt.Errorf("dedup floor %d past the state's time %d", c.dedupFloor, now)
	}
	return c.Check()
}

func initialGroupConfig() groupConfig {
	return groupConfig{BrokerConfig: DefaultBrokerConfig(), dedupFloor: math.MinInt64}
}

// nodeGroupConfig is the configuration of an empty state: the node's own
// values (filled in by FSM.adoptNodeConfig), until the group is seeded.
func nodeGroupConfig() groupConfig {
	return groupConfig{source: ConfigNode, dedupFloor: math.MinInt64}
}

// BrokerConfigInfo is the configuration a replica applies by, and where it
// comes from.
type BrokerConfigInfo struct {
	BrokerConfig
	Source ConfigSource
	Index  uint64 // the entry that set it, with ConfigGroup
}

// BrokerConfig returns the configuration this replica applies by.
func (f *FSM) BrokerConfig() BrokerConfigInfo {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	return f.brokerConfigInfo()
}

// adoptNodeConfig gives a state whose group has no configuration yet and
// that applies by the node's own values (ConfigNode: an empty state, or
// one of a checkpoint written before the broker group configuration)
// this node's values: what it applied by when it wrote that checkpoint.
func (f *FSM) adoptNodeConfig(cp *checkpoint) {
	if cp.st.config.source == ConfigNode {
		cp.st.config.BrokerConfig = f.cfg.BrokerConfig()
	}
}

// storeConfig is the node's configuration with the segment sizes of c, to
// open a store by.
func (f *FSM) storeConfig(c BrokerConfig) Config {
	cfg := f.cfg
	cfg.SegmentSize, cfg.IndexSegmentSize = c.SegmentSize, c.IndexSegmentSize
	return cfg
}

// useConfig makes next the configuration apply goes by, from the next
// command on. New segment sizes apply to every log from its next record
// (the active segment rolls by them); a new dedup window rebuilds both
// windows as a restart would, from the ids they hold: a shorter window
// forgets at once what it no longer covers, a longer one keeps what is
// held and what comes, but cannot recall what was already forgotten.
// Retention, MaxPull and MaxUnacked are read where they are used.
//
// Out of the node's own values (ConfigNode, fromNode), what each replica
// held was by its own window, which may differ from another's: the dedup
// floor is then set to the state's time on every replica, whatever its
// window was, and the windows rebuilt, so that their state is the same
// from here on and no replica recalls a delayed id, or schedules into an
// hour, that a shorter window than its own may have swept elsewhere.
// What that costs: a delayed message sent before the seed and sent again
// after it is scheduled twice. Apply goroutine only.
func (f *FSM) useConfig(next BrokerConfig, fromNode bool) {
	c := &f.st.config
	prev := c.BrokerConfig
	c.BrokerConfig = next
	f.windowBound = f.st.windowBound()
	if next.SegmentSize != prev.SegmentSize || next.IndexSegmentSize != prev.IndexSegmentSize {
		f.store.setSegmentSizes(next.SegmentSize, next.IndexSegmentSize)
	}
	if next.DedupWindow != prev.DedupWindow || fromNode {
		switch {
		case fromNode:
			c.dedupFloor = max(c.dedupFloor, f.st.now)
		case next.DedupWindow > prev.DedupWindow:
			c.dedupFloor = max(c.dedupFloor, f.st.now-prev.DedupWindow)
		}
		must(0, f.store.flush()) // the rebuild reads what this batch appended
		d, delayed, err := rebuildDedup(f.store, &checkpoint{st: f.st, dedupFrom: f.dedup.Oldest()})
		must(0, err)
		f.dedup, f.delayedDedup = d, delayed
	}
}

// windowBound returns at least the entries any consumer's window may hold:
// MaxUnacked, or more where a window pulled under an earlier, larger one
// has not been acked yet.
func (s *state) windowBound() int {
	n := s.config.MaxUnacked
	for _, cs := range s.consumers {
		n = max(n, len(cs.window))
	}
	return n
}

// warnFlags logs, once in the node's life, that its own values differ
// from its group's configuration c, which it follows: each setting that
// differs, with both values.
func (f *FSM) warnFlags(c BrokerConfig) {
	if f.flagsWarned {
		return
	}
	if diff := c.differences(f.cfg.BrokerConfig(), "this node's"); len(diff) > 0 {
		f.flagsWarned = true
		f.log.Warn("this node was started with settings that differ from its broker group's configuration: it follows the group's", diff...)
	}
}
