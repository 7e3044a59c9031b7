package fsm

import "github.com/qmqgo/qmq/internal/message"

// StoredMessage is one retained message as a lookup or a query finds it:
// the message and where the group stores it.
type StoredMessage struct {
	Offset  int64 // the record's offset in the message log
	Size    int   // the record's size (logs.RecordSize of its encoding)
	Seq     int64 // its sequence in its subject's consume log
	Message *message.Message
}

// MessageQuery selects messages of one subject by append time or from a
// consume sequence (browsing), optionally by tag and by key, reading no
// more than Budget consume-log entries. Nothing it does changes the state:
// no consumer group is created, nothing is handed out.
type MessageQuery struct {
	Subject string
	// Since and Until bound the append time, Unix milliseconds: Since
	// inclusive, Until exclusive; Until 0 means no end.
	Since, Until int64
	// FromSeq, when at least 0, starts at that consume sequence (a page
	// of a browse, or the Next of an earlier result) instead of at Since.
	FromSeq int64
	Tag     string // only messages carrying this tag; "" for any
	Key     string // only messages whose message.KeyProperty is Key; "" for any
	// Property, when not "", selects only messages that have a property
	// of that name whose value (the first's, as for Key) is PropertyValue.
	Property, PropertyValue string
	Limit                   int // messages to return: 1..limits.MaxQueryResults
	Budget                  int // consume-log entries to read at most: 0 for limits.DefaultScanBudget, at most limits.MaxScanBudget
	// MaxBytes, when above 0, bounds the record sizes of the messages
	// returned: the query stops before a message that would pass it
	// (returning at least one), and Next continues from there.
	MaxBytes int
}

// MessageQueryResult is a query's answer.
type MessageQueryResult struct {
	Messages []StoredMessage
	// Next is the consume sequence to continue from (FromSeq of the next
	// page), -1 when the window holds nothing more.
	Next int64
	// Scanned is how many consume-log entries the query read.
	Scanned int
	// Truncated: the budget ran out before the window did; the answer
	// holds what was found so far, and Next continues it. A caller shows
	// it as "truncated: narrow the window".
	Truncated bool
	// End is the subject's consume-log end when the query began reading
	// (the sequence its next message will take), 0 without a consume log:
	// less the sequence of the first message of a window, how many were
	// appended since, counted without reading them.
	End int64
}
