package fsm

import (
	"errors"
	"slices"

	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
)

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
//
// A message's sent event comes from its Append's sent record; without one
// (an Append of a node, or written before senders were recorded, or
// removed by retention before a delayed message fired) it is told from the
// message itself, without application or address. While the timeline's
// index is still being built after open the error wraps
// logs.ErrIndexBuilding.
func (f *FSM) Timeline(sm StoredMessage, max int) (events []Event, more bool, err error) {
	if max <= 0 || max > limits.MaxTimelineEvents {
		max = limits.MaxTimelineEvents
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, false, logs.ErrClosed
	}
	m := sm.Message
	t := timelineReader{s: f.store}
	sent := Event{Kind: EventSent, At: m.AppendedAt, Index: m.Index}
	var found []placed
	// The Append or Fire that put it in the message log.
	err = t.records(indexKey(m.Index), func(off int64, rec *tlRecord) {
		if rec.index != m.Index {
			return
		}
		switch rec.typ {
		case recSent:
			if sd := rec.senderOf(sm.Offset); sd != nil {
				sent.App, sent.Addr = sd.App, sd.Addr
			}
		case recFired:
			for _, e := range rec.fired {
				if e.offset != sm.Offset {
					continue
				}
				sent = Event{Kind: EventSent, At: e.sentAt, Index: e.sentIndex, App: e.app, Due: e.due}
				found = append(found, placed{off, Event{Kind: EventFired, At: rec.at, Index: rec.index}})
				err := t.records(indexKey(e.sentIndex), func(_ int64, srec *tlRecord) {
					if srec.typ != recSent || srec.index != e.sentIndex {
						return
					}
					if sd := srec.scheduledBy(e.ref); sd != nil {
						sent.App, sent.Addr = sd.App, sd.Addr
					}
				})
				if err != nil {
					t.err = err
				}
			}
		}
	})
	if err != nil {
		return nil, false, err
	}
	// What consumer groups did with it.
	if sm.Seq >= 0 {
		h := dedup.HashID(m.Subject)
		seen := map[int64]bool{} // a record under both keys: a short run and a long one
		for _, key := range []uint64{seqKey(h, sm.Seq), blockKey(h, sm.Seq>>timelineBlockBits)} {
			err = t.records(key, func(off int64, rec *tlRecord) {
				if rec.typ != recConsumer || rec.subject != m.Subject || seen[off] {
					return
				}
				seen[off] = true
				for _, r := range rec.seqs {
					if sm.Seq >= r.first && sm.Seq < r.first+r.count {
						found = append(found, placed{off, Event{Kind: rec.kind, At: rec.at, Index: rec.index,
							App: rec.by, Group: rec.group, Consumer: rec.consumer, Delivery: int(r.delivery), Due: r.due}})
					}
				}
			})
			if err != nil {
				return nil, false, err
			}
		}
	}
	// Records are in apply order; within one, events in the order written.
	slices.SortStableFunc(found, func(a, b placed) int { return int(a.off - b.off) })
	events = append(make([]Event, 0, min(len(found)+1, max)), sent)
	for _, p := range found {
		if len(events) == max {
			return events, true, nil
		}
		events = append(events, p.ev)
	}
	return events, false, nil
}

// placed is an event and the offset of the record that holds it.
type placed struct {
	off int64
	ev  Event
}

// timelineReader reads the timeline's records of a key.
type timelineReader struct {
	s   *store
	err error
}

// records calls fn with each readable record under key, oldest first as
// the index gives them; a record removed by retention, or appended by the
// batch being applied, is passed over.
func (t *timelineReader) records(key uint64, fn func(off int64, rec *tlRecord)) error {
	tl := t.s.timeline
	var offs []int64
	if err := t.s.tlIndex.Lookup(key, func(off int64) bool {
		offs = append(offs, off)
		return true
	}); err != nil {
		return err
	}
	slices.Sort(offs)
	for _, off := range slices.Compact(offs) {
		if off >= tl.End() {
			continue
		}
		p, err := tl.Read(off)
		if errors.Is(err, logs.ErrRetained) {
			continue
		}
		if err != nil {
			return err
		}
		rec, err := decodeTimelineRecord(p)
		if err != nil {
			return err
		}
		fn(off, rec)
		if t.err != nil {
			return t.err
		}
	}
	return nil
}

// senderOf returns who sent the appended message at offset, nil if the
// record does not say.
func (rec *tlRecord) senderOf(offset int64) *Sender {
	for _, run := range rec.runs {
		if offset <= run.last {
			return rec.sender(run.sender)
		}
	}
	return nil
}

// scheduledBy returns who sent the delayed message of schedule reference ref.
func (rec *tlRecord) scheduledBy(ref uint64) *Sender {
	for _, sc := range rec.sched {
		if sc.ref == ref {
			return rec.sender(sc.sender)
		}
	}
	return nil
}

func (rec *tlRecord) sender(i int) *Sender {
	if i < 1 || i > len(rec.senders) {
		return nil
	}
	return &rec.senders[i-1]
}
