package fsm

// Responses of Apply, one type per command. A command that is refused as a
// whole returns an error wrapping ErrInvalid instead, and changes nothing.

// MessageStatus says what an Append did with one message.
type MessageStatus uint8

// Message statuses.
const (
	// Appended: the message was appended now.
	Appended MessageStatus = 1
	// Duplicate: a message with this id was appended within the dedup window;
	// it was not appended again. The send succeeded.
	Duplicate MessageStatus = 2
	// Rejected: the message is invalid (see MessageResult.Err); nothing was written.
	Rejected MessageStatus = 3
	// Scheduled: the message is delayed; it was written to the schedule log
	// (see MessageResult.Ref) and moves to the message log when due.
	Scheduled MessageStatus = 4
)

// MessageResult is the outcome of one message of an Append.
type MessageResult struct {
	Status MessageStatus
	Offset int64  // message-log offset (of the earlier copy for a Duplicate); -1 for a delayed message
	Seq    int64  // consume-log sequence; -1 unless Appended
	Ref    uint64 // schedule reference of a delayed message (Scheduled, or a Duplicate of one)
	At     int64  // due time of a Scheduled message
	Err    error  // why it was Rejected
}

// AppendResult answers an Append, one result per message in order.
type AppendResult struct {
	Messages []MessageResult
}

// Pulled is one entry handed to a consumer.
type Pulled struct {
	PullSeq    int64  // the consumer's pull sequence: what it acks
	ConsumeSeq int64  // the subject's sequence: where the message is
	Deliveries uint32 // how many times the group has handed it out, this time included
	// At is where its message lies, if the pull was bounded in bytes (see
	// PullResult.Located): Offset Gone if retention removed it.
	At MessageAt
}

// PullResult answers a Pull. It may hold fewer entries than asked for, or
// none: the group has nothing more, or the consumer holds its most.
// Epoch is the consumer's registration, which its acks must name. More
// says a tag-filtered pull stopped at its scan bound with entries left to
// look at: pull again at once rather than wait for new messages. Located
// says the entries' At are set: a pull bounded in bytes (MaxBytes) read
// them, and the leader need not read them again.
type PullResult struct {
	Epoch   uint64
	Entries []Pulled
	More    bool
	Located bool
	// Need, with no entries, is the record size of the message that did
	// not fit the pull's MaxBytes: the leader pulls again once it holds
	// that much memory.
	Need int64
}

// AckResult answers an Ack with the consumer's ack position: every pull
// sequence below it is acknowledged.
type AckResult struct {
	AckPos int64
}

// ReclaimResult answers a Reclaim with how many unacked entries went back
// to the group.
type ReclaimResult struct {
	Reclaimed int
	// Forgotten: the consumer's group went with it (a group of a subject
	// without messages, as its last consumer's pull created it).
	Forgotten bool
}

// ForgetResult answers a Forget: whether the group was known, and how many
// consumers and unacked entries went with it.
type ForgetResult struct {
	Known     bool
	Consumers int
	Unacked   int
}

// FireResult answers a Fire.
type FireResult struct {
	Fired    int      // entries moved into the message log now
	Passed   int      // entries already fired, not due, or unknown: nothing done
	Subjects []string // subjects that received messages, each once
}

// NackResult answers a Nack: how many entries will come back to the group
// (Due of them at once, the others at their retry time), and how many
// became dead letters.
type NackResult struct {
	Retried, Dead, Due int
}

// ExtendResult answers an Extend: how many entries got their ack wait again.
type ExtendResult struct {
	Extended int
}

// ExpireResult answers an Expire: how many entries went back to the group,
// and how many became dead letters.
type ExpireResult struct {
	Expired, Dead int
}

// ConsumerGroupResult answers a SetGroup or ResetGroup: whether it created the group.
type ConsumerGroupResult struct {
	Created bool
}

// DeadLettersResult answers a DeadLetters: how many it resent or purged.
type DeadLettersResult struct {
	Done int
}

// BrokerConfigResult answers a SetBrokerConfig with the configuration in
// effect after it, and whether the command set it (a seed of a group
// already configured does not).
type BrokerConfigResult struct {
	Changed bool
	Config  BrokerConfigInfo
}
