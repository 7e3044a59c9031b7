package fsm

// EventKind says what happened to a message: one step of its timeline.
type EventKind uint8

// The kinds of timeline events. Values are stored: never renumber them.
const (
	EventSent         EventKind = 1  // appended, or scheduled when Due is set, by App from Addr
	EventFired        EventKind = 2  // a delayed message became due and was appended
	EventHandedOut    EventKind = 3  // handed to Consumer of Group, its Delivery-th time
	EventAcked        EventKind = 4  // acknowledged by Consumer of Group
	EventNacked       EventKind = 5  // refused by Consumer of Group, to be retried at Due
	EventExpired      EventKind = 6  // its ack wait passed in Group: handed out again later
	EventReclaimed    EventKind = 7  // Consumer of Group was reclaimed while it held it
	EventDeadLettered EventKind = 8  // a dead letter of Group after its Delivery-th delivery
	EventResent       EventKind = 9  // a dead letter of Group resent by App
	EventPurged       EventKind = 10 // a dead letter of Group purged by App
)

var eventNames = [...]string{
	EventSent: "sent", EventFired: "fired", EventHandedOut: "handed-out", EventAcked: "acked",
	EventNacked: "nacked", EventExpired: "expired", EventReclaimed: "reclaimed",
	EventDeadLettered: "dead-lettered", EventResent: "resent", EventPurged: "purged",
}

// String returns the kind's name as the wire and the tools show it.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Event is one step of a message's timeline, as the replicated command that
// caused it recorded it at apply: byte for byte the same on every replica.
type Event struct {
	Kind  EventKind
	At    int64  // the command's stamped time, Unix milliseconds
	Index uint64 // the Raft index of the command
	// App: for sent, the sending application; for resent and purged, the
	// application that asked. "" for none (authentication off, or a node).
	App  string
	Addr string // sent: the client's address as the leader saw it; "" if unknown
	// Group and Consumer: the consumer group and consumer of a consumer's
	// event ("" for sent and fired).
	Group, Consumer string
	Delivery        int   // handed out, dead lettered: the delivery's number, 1 for the first
	Due             int64 // sent delayed: the delivery time; nacked: the retry time; else 0
}

// Timeline returns what happened to a message FindMessage or QueryMessages
// returned, oldest first, at most max events (0: limits.MaxTimelineEvents);
// more reports that it has more. Safe on any goroutine; it sees what was
// applied.
func (f *FSM) Timeline(sm StoredMessage, max int) (events []Event, more bool, err error) {
	return nil, false, nil
}
