// Package limits holds the limits that more than one layer enforces: the
// SDK checks a message against them before sending it, the wire decoders
// and the leader before proposing it, the state machine again when it
// applies it, and the logs size their records by them. Defining each once
// is what makes "a message one layer accepts fits every other" true by
// construction: a message of MaxMessage encoded bytes fits a send frame, a
// Raft entry, a message-log record, a schedule record and a pull reply
// (TestLimitsFitEveryPath in package server sends one through all of them).
//
// It is also the protocol floor the client shares with the broker: the
// naming rule (CheckName), ConsumerID and the metaserver group's name live
// here, so that the SDK checks what the broker checks without linking the
// broker's packages (Raft, bolt, the state machines). So are a consumer
// group's settings: their defaults and bounds (groups.go) are what the
// state machine applies, what qmqctl checks its flags against and prints
// in its help, and what the SDK checks a broadcast group's expiry against.
package limits

import "time"

// The wire.
const (
	// MaxFrame is the largest frame on the client protocol: its length
	// field (everything after the 4-byte length) may not exceed it.
	MaxFrame = 16 << 20

	// Envelope bounds what a frame carries besides one message: the frame
	// header (13 bytes), a response status (1), a payload version (1), a
	// count, a pull sequence and an epoch (uvarints of at most 10 bytes
	// each). It is generous so that a field added to a request or reply
	// later cannot push a largest message over MaxFrame.
	Envelope = 4 << 10

	// MaxMessage is the largest encoded message (the message.Message encoding,
	// which is both the wire form and the message-log record): MaxFrame less
	// the envelope, so that one message always fits a send frame and a pull
	// reply.
	MaxMessage = MaxFrame - Envelope

	// ScheduleRecordHeader is what a schedule record adds to a message (its
	// own offset and its due time, 16 bytes, and the code of the
	// application that sent it, at most MaxName bytes after a 2-byte
	// length): a schedule record's payload is at most MaxMessage +
	// ScheduleRecordHeader bytes.
	ScheduleRecordHeader = 16 + 2 + MaxName
)

// A largest message with its envelope fits a frame: the build fails if a
// change to the constants above breaks that (a negative constant does not
// convert to uint).
const _ = uint(MaxFrame - MaxMessage - Envelope)

// Counts in one request or command.
const (
	// MaxBatchMessages bounds the messages of one send request and of one
	// Append command.
	MaxBatchMessages = 10000
	// MaxPullMessages bounds what one pull may ask for.
	MaxPullMessages = 10000
	// MaxAckRanges bounds the ranges of one ack request and Ack command.
	MaxAckRanges = 4096
	// MaxFireRefs bounds the schedule references of one Fire command.
	MaxFireRefs = 10000
	// MaxFireBytes bounds the schedule records one Fire moves into the
	// message log: a leader adds references to a Fire while their records
	// come to less, so that a replica knows, before it applies a Fire, the
	// space it may need (at most this plus one record).
	MaxFireBytes = 64 << 20
)

// Names and addresses.
const (
	// MaxName bounds a subject, consumer group, consumer, broker group or
	// node name (see CheckName).
	MaxName = 200
	// MaxSecret bounds an application's secret as a client presents it
	// (the Hello's decoder and the table's check both hold to it).
	MaxSecret = 128
	// MaxAddr bounds a HOST:PORT address recorded in replicated state.
	MaxAddr = 256
	// MaxErrorText bounds the text of an error on the wire.
	MaxErrorText = 4096
)

// Time.
const (
	// MaxPullWait bounds the long-poll wait a pull may ask for (a broker
	// also caps it lower, at its own maximum).
	MaxPullWait = time.Hour
	// DefaultMaxDelay is two years (731 days): how far ahead a delayed
	// message may be due unless a producer or a broker is configured
	// otherwise.
	DefaultMaxDelay = 731 * 24 * time.Hour
)

// What one broker group's replicated state may hold. Apply refuses a
// command that would pass one (a send to one subject more, a pull by one
// consumer more) alike on every replica: these are constants, not
// settings, so that every replica decides alike. Each bounds memory a
// client can make every replica hold.
const (
	// MaxSubjectsPerBrokerGroup bounds the subjects one broker group
	// holds: those with messages (a consume log) or delayed messages
	// pending. (The subjects with a route, over all broker groups, are
	// bounded by the metaserver: meta.MaxRoutedSubjects.)
	MaxSubjectsPerBrokerGroup = 65536
	// MaxConsumerGroupsPerSubject bounds the consumer groups of one
	// subject (the metaserver records as many).
	MaxConsumerGroupsPerSubject = 4096
	// MaxConsumerGroups bounds the consumer groups over all subjects of
	// one broker group.
	MaxConsumerGroups = 65536
	// MaxConsumersPerGroup bounds the registered consumers of one group.
	MaxConsumersPerGroup = 1024
	// MaxConsumers bounds the registered consumers over all groups. With
	// each holding at most its MaxUnacked entries (10,000 by default, 24
	// bytes each in memory), this bounds the unacked windows.
	MaxConsumers = 16384
	// MaxDelayedPerHour bounds the delayed messages one hour of delivery
	// time of a broker group holds (pending and fired: the leader's wheel
	// holds about 31 bytes per pending one of the current and next hour,
	// and every replica about 30 bytes per fired one of an hour being
	// fired, so an hour at the bound costs a node about 600 MB, the leader
	// about twice that while it fires the hour: 5,500 delayed messages a
	// second, each due within the hour, fill it).
	MaxDelayedPerHour = 20_000_000
	// MaxDelayed bounds an application's setting of delayed messages
	// pending in a broker group (auth.App.MaxDelayed).
	MaxDelayed = 1 << 30
)

// Message queries (lookup by id, listing and browsing a subject) are
// bounded: a query returns at most MaxQueryResults messages and reads at
// most its scan budget of consume-log entries (DefaultScanBudget unless it
// names one, at most MaxScanBudget), then says it was truncated.
const (
	MaxQueryResults   = 1000
	DefaultScanBudget = 100_000
	MaxScanBudget     = 1_000_000
	// MaxTimelineEvents bounds the events of one message's timeline a
	// lookup returns; it says when there are more.
	MaxTimelineEvents = 1000
)
