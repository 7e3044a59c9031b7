package transport

import "time"

// BrokerConfig is a broker group's configuration: the settings that decide
// what its state machine applies, which every node of the group holds in
// its replica and applies by (see the state machine's BrokerConfig for
// each setting's meaning and bounds).
type BrokerConfig struct {
	RetentionAge     time.Duration `json:"retention_age"`   // 0: no age bound
	RetentionBytes   int64         `json:"retention_bytes"` // 0: no size bound
	DedupWindow      time.Duration `json:"dedup_window"`
	MaxPull          int           `json:"max_pull"`
	MaxUnacked       int           `json:"max_unacked"`
	SegmentSize      int64         `json:"segment_size"`
	IndexSegmentSize int64         `json:"index_segment_size"`
	// Source is where the values come from: "broker-group", set by a
	// configuration command at Index; "node", the node's own values,
	// before the group's first (a new group's until its first leader
	// seeds it, or a state from before the broker group configuration);
	// "initial", the defaults, only from a checkpoint an earlier build of
	// this release wrote.
	Source string `json:"source"`
	Index  uint64 `json:"index,omitempty"`
}

// BrokerConfigInfo answers TypeBrokerConfig and TypeSetBrokerConfig: the
// configuration one node's replica holds, as of its applied index.
type BrokerConfigInfo struct {
	BrokerGroup  string       `json:"broker_group"`
	Node         string       `json:"node"`
	AppliedIndex uint64       `json:"applied_index"`
	Config       BrokerConfig `json:"config"`
}

// SetBrokerConfigRequest changes the settings given (nil ones stay) of the
// broker group whose leader receives it. Durations are whole milliseconds.
type SetBrokerConfigRequest struct {
	RetentionAge     *time.Duration `json:"retention_age,omitempty"`
	RetentionBytes   *int64         `json:"retention_bytes,omitempty"`
	DedupWindow      *time.Duration `json:"dedup_window,omitempty"`
	MaxPull          *int           `json:"max_pull,omitempty"`
	MaxUnacked       *int           `json:"max_unacked,omitempty"`
	SegmentSize      *int64         `json:"segment_size,omitempty"`
	IndexSegmentSize *int64         `json:"index_segment_size,omitempty"`
}
