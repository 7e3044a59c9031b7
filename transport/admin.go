package transport

import (
	"encoding/json"
	"github.com/qmqgo/qmq/internal/version"
	"time"
)

// Membership requests are rare and human-driven, so their payloads are
// JSON. Status answers with the server's status as JSON too.

// JoinRequest asks a group's leader to add a node as a voter.
type JoinRequest struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
}

// TransferRequest asks a group's leader to hand leadership to the node ID,
// or to any up-to-date voter when ID is empty (for rolling restarts).
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// LeaveRequest asks a group's leader to remove a node.
type LeaveRequest struct {
	ID string `json:"id"`
}

// DecodeJSON decodes a JSON payload into v, as an INVALID error on failure.
func DecodeJSON(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return Errorf(Invalid, "malformed JSON payload: %v", err)
	}
	return nil
}

// Status is a node's answer to a status request (and its /status page).
type Status struct {
	ID           string   `json:"id"`
	Group        string   `json:"group"`
	State        string   `json:"state"`       // Leader, Follower, Candidate or Shutdown
	Leader       string   `json:"leader"`      // the leader's node id, "" if unknown
	LeaderAddr   string   `json:"leader_addr"` // the leader's client address
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`  // highest Raft index known committed
	AppliedIndex uint64   `json:"applied_index"` // highest index applied to the state machine
	LastIndex    uint64   `json:"last_index"`    // highest index in this node's Raft log
	ClientAddr   string   `json:"client_addr"`
	RaftAddr     string   `json:"raft_addr"`
	Members      []Member `json:"members"`
	// The newest snapshot the node holds: its Raft index and term, and
	// when it was taken (absent if it holds none). Entries before it may
	// be compacted from the node's log.
	LastSnapshotIndex uint64    `json:"last_snapshot_index,omitempty"`
	LastSnapshotTerm  uint64    `json:"last_snapshot_term,omitempty"`
	LastSnapshotAt    time.Time `json:"last_snapshot_at,omitzero"`
	// Backups is how many snapshots the node holds open for backups
	// (TypeBackup) now.
	Backups int `json:"backups,omitempty"`
	// TLS: the node's ports serve TLS only. Insecure: the node has no TLS
	// and serves on an address that is not on loopback, which it was
	// allowed to by --insecure (NodeConfig.Insecure).
	TLS      bool `json:"tls"`
	Insecure bool `json:"insecure,omitempty"`
	// Auth: the node checks applications (NodeConfig.Auth).
	Auth bool `json:"auth"`
	// Broker nodes only: deliveries the known consumer groups still owe
	// (not yet pulled, or pulled and unacknowledged), and whether the
	// metaserver has drained the group.
	Backlog  int64 `json:"backlog,omitempty"`
	ReadOnly bool  `json:"readonly,omitempty"`
	// The data disk's free bytes (metaserver nodes too); broker nodes
	// only: whether sends are
	// refused for want of space (DISK_FULL); whether the state machine
	// waits for space before applying more; why it stopped applying for
	// good, if it did (the node then stops).
	DiskFree     int64  `json:"disk_free,omitempty"`
	DiskFull     bool   `json:"disk_full,omitempty"`
	ApplyWaiting bool   `json:"apply_waiting_for_disk,omitempty"`
	Stopped      string `json:"stopped,omitempty"`
	// Broker nodes only: why the node serves no client (nodes still
	// reach it), "" while it serves them: its authentication and its
	// metaserver's disagree (docs/security.md, "Turning --auth on").
	Refusing string `json:"refusing,omitempty"`
	// Broker nodes only: the broker group's configuration as this node's
	// replica holds it (absent from nodes of a release without it).
	BrokerConfig *BrokerConfig `json:"broker_config,omitempty"`
	// The version Numbers this node's build supports (absent from a node
	// of a release before version gates, which supports V1 alone:
	// version.Range.OrV1), and its group's active Number as its replica
	// holds it (absent while the group records none: V1).
	Versions      *version.Range `json:"versions,omitempty"`
	ActiveVersion version.Number `json:"active_version,omitempty"`
}

// SetVersionRequest asks a group's leader to raise the group's active
// version Number to Version (TypeSetVersion, JSON; answered with
// SetVersionResponse), once every member of the group supports it.
// Group names the broker group, or "meta" for the metaserver group; the
// request goes to that group's nodes, and its leader answers.
type SetVersionRequest struct {
	Group   string         `json:"group"`
	Version version.Number `json:"version"`
}

// SetVersionResponse is the group's active Number once the request is
// applied, and the one before it.
type SetVersionResponse struct {
	Group    string         `json:"group"`
	Previous version.Number `json:"previous"`
	Active   version.Number `json:"active"`
}

// Member is one member of a broker group.
type Member struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"` // "" until the member's address is recorded
	Suffrage   string `json:"suffrage"`    // Voter, Nonvoter or Staging
}

// ForgetConsumerGroupRequest asks a broker group to forget a consumer group of a
// subject: its position, its redelivery queue and its consumers.
type ForgetConsumerGroupRequest struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"group"`
	// Broker, sent to the metaserver by a broker group's leader, says
	// that broker group forgot the group by itself (idle, or gone with its
	// last consumer before the subject had a message): the metaserver's
	// record goes if it was only that broker group's (recorded for a pull,
	// see RouteRequest.Broker) and no other broker group holds it.
	Broker string `json:"broker,omitempty"`
}

// ForgetConsumerGroupResult answers a ForgetConsumerGroupRequest: whether the broker group
// knew the consumer group, and how many consumers and unacknowledged
// messages went with it.
type ForgetConsumerGroupResult struct {
	Known     bool `json:"known"`
	Consumers int  `json:"consumers"`
	Unacked   int  `json:"unacked"`
}

// Delays answers TypeDelays: a broker group's pending delayed messages as
// one replica holds them.
type Delays struct {
	BrokerGroup  string           `json:"group"`
	Node         string           `json:"node"`
	AppliedIndex uint64           `json:"applied_index"`
	Pending      int64            `json:"pending"`
	Hours        []HourPending    `json:"hours"`    // oldest first
	Subjects     map[string]int64 `json:"subjects"` // subject → pending
}

// HourPending counts the delayed messages due within one UTC hour.
type HourPending struct {
	Hour    string `json:"hour"` // its first instant, RFC 3339
	Pending int64  `json:"pending"`
}
