package transport

import "time"

// Message lookups, for operators: JSON requests any node of a broker group
// answers from its replica, reading the logs and changing nothing (no
// consumer group is created, nothing is handed out). A tool asks every
// broker group for an id, or every broker group of a subject's route for
// a listing, and puts the answers together.

// MessagesRequest finds messages in one broker group: with ID every
// retained message of that id (lookup by id, through the group's index);
// otherwise the messages of Subject appended in [Since, Until) (a zero
// Until: no end), or with FromSeq from that consume sequence on
// (browsing), those carrying Tag, whose key (the qmq.key property) is
// Key and that have Property (its Key, with its Value), at most Limit of them, reading at most Budget consume-log entries
// (0 for the broker's default). Body asks for each message's body and
// properties too; Timeline, valid with ID only, for each message's
// timeline (what happened to it: StoredMessage.Timeline).
type MessagesRequest struct {
	ID       string    `json:"id,omitempty"`
	Subject  string    `json:"subject,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Until    time.Time `json:"until,omitzero"`
	FromSeq  *int64    `json:"from_seq,omitempty"`
	Tag      string    `json:"tag,omitempty"`
	Key      string    `json:"key,omitempty"`
	Property *Property `json:"property,omitempty"`
	Limit    int       `json:"limit,omitempty"`
	Budget   int       `json:"budget,omitempty"`
	Body     bool      `json:"body,omitempty"`
	Timeline bool      `json:"timeline,omitempty"`
}

// StoredMessage is one message as a broker group stores it: where (its
// broker group, its consume sequence in its subject, its offset in the
// message log and its record's size, the Raft index that appended it),
// when it was created and appended, and what it holds. Properties and
// Body are there only when the request asked for bodies; BodyOmitted says
// the body was left out of a reply that had no room for it. Timeline is
// there only when a lookup by id asked for it: what happened to the
// message, oldest first; TimelineMore says the message has events after
// the last one shown (the broker answers at most 1,000, and fewer when
// the reply has no room for them all); TimelineError, that the timeline
// could not be read (its index is being built after a restart, or the
// disk failed) though the message could.
type StoredMessage struct {
	BrokerGroup   string     `json:"broker_group"`
	Subject       string     `json:"subject"`
	ID            string     `json:"id"`
	Seq           int64      `json:"seq"`
	Offset        int64      `json:"offset"`
	Size          int        `json:"size"`
	RaftIndex     uint64     `json:"raft_index"`
	CreatedAt     time.Time  `json:"created_at"`
	AppendedAt    time.Time  `json:"appended_at"`
	Tags          []string   `json:"tags,omitempty"`
	Key           string     `json:"key,omitempty"`
	BodySize      int        `json:"body_size"`
	Properties    []Property `json:"properties,omitempty"`
	Body          []byte     `json:"body,omitempty"`
	BodyOmitted   bool       `json:"body_omitted,omitempty"`
	Timeline      []Event    `json:"timeline,omitempty"`
	TimelineMore  bool       `json:"timeline_more,omitempty"`
	TimelineError string     `json:"timeline_error,omitempty"`
}

// Event is one step of a message's timeline, as the replicated command
// that caused it recorded it: the same on every replica of its broker
// group.
type Event struct {
	// Kind names what happened: "sent" (appended, or scheduled when Due
	// is set), "fired" (a delayed message became due and was appended),
	// "handed-out", "acked", "nacked" (to be retried at Due), "expired"
	// (its ack wait passed: handed out again later), "reclaimed" (its
	// consumer was reclaimed while it held it), "dead-lettered",
	// "resent", "purged" (a dead letter resent or purged by App).
	Kind string `json:"kind"`
	// At is when the command was stamped by the leader that proposed it,
	// to the millisecond.
	At time.Time `json:"at"`
	// RaftIndex is the Raft index of the command.
	RaftIndex uint64 `json:"raft_index"`
	// App is, for sent, the sending application; for resent and purged,
	// the application that asked; "" for none (authentication off, or a
	// node).
	App string `json:"app,omitempty"`
	// ClientAddress is, for sent, the producer's address as the leader
	// saw it; "" when unknown.
	ClientAddress string `json:"client_address,omitempty"`
	// ConsumerGroup and Consumer are the consumer group and the consumer
	// of a consumer's event ("" for sent and fired).
	ConsumerGroup string `json:"consumer_group,omitempty"`
	Consumer      string `json:"consumer,omitempty"`
	// Delivery is, for handed-out and dead-lettered, the delivery's
	// number (1 for the first); 0 otherwise.
	Delivery int `json:"delivery,omitempty"`
	// Due is, for a delayed send, when it is to be delivered; for a nack,
	// when it is retried; zero otherwise.
	Due time.Time `json:"due,omitzero"`
}

// Property is one property of a stored message, in the order the
// producer set them.
type Property struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// MessagesPage answers a MessagesRequest. Next is the consume sequence a
// listing continues from (a MessagesRequest's FromSeq), -1 when the
// window holds nothing more; Truncated says the scan budget ran out
// before the window did (narrow the window, or continue from Next). End
// is, for a listing, the subject's consume-log end on the replica that
// answered (the sequence its next message takes; 0 without one): End
// less the first message's Seq is how many messages were appended from
// it on, counted without reading them.
type MessagesPage struct {
	BrokerGroup string          `json:"broker_group"`
	Messages    []StoredMessage `json:"messages"`
	Next        int64           `json:"next"`
	Scanned     int             `json:"scanned"`
	Truncated   bool            `json:"truncated,omitempty"`
	End         int64           `json:"end,omitempty"`
}
