package transport

import "time"

// Consumer groups, for operators: JSON requests a broker group's leader
// answers from its replicated state. An SDK or tool asks every broker
// group of a subject and adds the answers up.

// ConsumerGroupsRequest asks for the consumer groups of a broker group: every one,
// those of Subject, or the one named by Subject and Group.
type ConsumerGroupsRequest struct {
	Subject       string `json:"subject,omitempty"`
	ConsumerGroup string `json:"group,omitempty"`
}

// ConsumerGroupSettings is how a consumer group consumes (see the state machine's
// ConsumerGroupSettings for each field's meaning and bounds).
type ConsumerGroupSettings struct {
	MaxDeliveries uint32        `json:"max_deliveries"`
	RetryFirst    time.Duration `json:"retry_first"`
	RetryMax      time.Duration `json:"retry_max"`
	AckWait       time.Duration `json:"ack_wait"`      // 0: none
	MaxInFlight   uint32        `json:"max_in_flight"` // 0: the broker's default
	IdleExpiry    time.Duration `json:"idle_expiry"`   // 0: never
}

// ConsumerGroupInfo is one consumer group in one broker group.
type ConsumerGroupInfo struct {
	BrokerGroup   string                `json:"broker_group"`
	Subject       string                `json:"subject"`
	ConsumerGroup string                `json:"group"`
	Settings      ConsumerGroupSettings `json:"settings"`
	Cursor        int64                 `json:"cursor"`       // the next sequence to hand out
	End           int64                 `json:"end"`          // the subject's next sequence
	Backlog       int64                 `json:"backlog"`      // not handed out yet
	Redeliver     int                   `json:"redeliver"`    // due again now
	Retrying      int64                 `json:"retrying"`     // waiting for their retry time
	Unacked       int                   `json:"unacked"`      // handed out, not finished
	Lag           int64                 `json:"lag"`          // all four: what the group owes
	Consumers     int                   `json:"consumers"`    // online
	DeadLetters   int                   `json:"dead_letters"` // kept
	DeadDropped   int64                 `json:"dead_dropped"` // dropped at the bounds
	Lost          int64                 `json:"lost"`         // removed by retention before the group finished them
	IdleSince     time.Time             `json:"idle_since"`   // with no consumer since (when Consumers is 0)
	// Members are the group's registered consumers, in the order they
	// registered: only in the answer for one group (a request naming it).
	Members []ConsumerMember `json:"members,omitempty"`
}

// ConsumerMember is one consumer of a group in one broker group: how many
// messages it holds handed out and not finished, and how long ago the
// leader last heard from it (-1: the node answering does not lead, or has
// not heard from it since it took the lead).
type ConsumerMember struct {
	Name       string `json:"name"`
	InFlight   int    `json:"in_flight"`
	SeenMillis int64  `json:"seen_ms"`
}

// SetConsumerGroupRequest changes the settings given (nil ones stay), creating the
// group at Start if it does not exist.
type SetConsumerGroupRequest struct {
	Subject       string         `json:"subject"`
	ConsumerGroup string         `json:"group"`
	MaxDeliveries *uint32        `json:"max_deliveries,omitempty"`
	RetryFirst    *time.Duration `json:"retry_first,omitempty"`
	RetryMax      *time.Duration `json:"retry_max,omitempty"`
	AckWait       *time.Duration `json:"ack_wait,omitempty"`
	MaxInFlight   *uint32        `json:"max_in_flight,omitempty"`
	IdleExpiry    *time.Duration `json:"idle_expiry,omitempty"`
	Start         StartPosition  `json:"start,omitempty"`
	StartAt       time.Time      `json:"start_at,omitzero"`
}

// ResetConsumerGroupRequest moves a consumer group to To (StartAt for StartAtTime).
type ResetConsumerGroupRequest struct {
	Subject       string        `json:"subject"`
	ConsumerGroup string        `json:"group"`
	To            StartPosition `json:"to"`
	At            time.Time     `json:"at,omitzero"`
}

// ConsumerGroupResult answers a SetConsumerGroupRequest or ResetConsumerGroupRequest.
type ConsumerGroupResult struct {
	Created bool `json:"created"`
}

// DeadLettersRequest lists a group's dead letters from the Offset-th,
// at most Limit (the broker caps it), oldest first, with each message's
// id and size; or, with Seq set, reads that one dead letter whole.
type DeadLettersRequest struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"group"`
	Offset        int    `json:"offset,omitempty"`
	Limit         int    `json:"limit,omitempty"`
	Seq           *int64 `json:"seq,omitempty"`
}

// DeadLetter is one dead letter: where its message is, how often it was
// delivered, when it died, and the message (its id, tags and size; the
// whole message when one was asked for). Removed says retention removed
// the message.
type DeadLetter struct {
	Seq        int64             `json:"seq"`
	Deliveries uint32            `json:"deliveries"`
	At         time.Time         `json:"at"`
	ID         string            `json:"id,omitempty"`
	Tags       []string          `json:"tags,omitempty"`
	Size       int               `json:"size"`
	CreatedAt  time.Time         `json:"created_at,omitzero"`
	Properties map[string]string `json:"properties,omitempty"`
	Body       []byte            `json:"body,omitempty"`
	Removed    bool              `json:"removed,omitempty"`
}

// DeadLetterPage answers a DeadLettersRequest.
type DeadLetterPage struct {
	BrokerGroup string       `json:"broker_group"`
	Total       int          `json:"total"`
	Letters     []DeadLetter `json:"letters"`
}

// DeadLetterOp is what a DeadLetterOpRequest does.
type DeadLetterOp string

// Dead-letter operations.
const (
	DeadLetterResend DeadLetterOp = "resend"
	DeadLetterPurge  DeadLetterOp = "purge"
)

// DeadLetterOpRequest resends (to the group, its delivery count afresh) or
// purges the dead letters named by Seqs, or with All every one.
type DeadLetterOpRequest struct {
	Subject       string       `json:"subject"`
	ConsumerGroup string       `json:"group"`
	Op            DeadLetterOp `json:"op"`
	All           bool         `json:"all,omitempty"`
	Seqs          []int64      `json:"seqs,omitempty"`
}

// DeadLetterOpResult answers a DeadLetterOpRequest: how many were done.
type DeadLetterOpResult struct {
	Done int `json:"done"`
}
