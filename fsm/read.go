package fsm

import (
	"errors"
	"fmt"

	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// ErrNoSubject means a subject has no messages on this broker group.
var ErrNoSubject = fmt.Errorf("%w: no such subject", logs.ErrBeyondEnd)

// Message reads the message with consume-log sequence seq of subject, as
// a pull handed it out. Safe on any goroutine; it sees what was applied.
func (f *FSM) Message(subject string, seq int64) (*message.Message, error) {
	at, err := f.Locate(subject, seq)
	if err != nil {
		return nil, err
	}
	return f.ReadMessage(at)
}

// MessageAt is where a message lies in the message log, and the size of
// its record (its encoding and 8 bytes).
type MessageAt struct {
	Offset int64
	Size   int
}

// Locate returns where the message with consume-log sequence seq of
// subject lies, without reading it: a pull reserves memory for it first.
// Safe on any goroutine.
func (f *FSM) Locate(subject string, seq int64) (MessageAt, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return MessageAt{}, logs.ErrClosed
	}
	cl := f.store.consumeLog(subject)
	if cl == nil {
		return MessageAt{}, fmt.Errorf("%w: %s", ErrNoSubject, subject)
	}
	e, err := cl.Get(seq)
	return MessageAt{Offset: e.Offset, Size: e.Size}, err
}

// ReadMessage reads the message Locate found. Safe on any goroutine.
func (f *FSM) ReadMessage(at MessageAt) (*message.Message, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	return f.store.messages.Read(at.Offset, at.Size)
}

// Gone marks a MessageAt of LocateAll or a wire form of ReadWires whose
// message retention removed.
const Gone = -1

// LocateAll returns where the messages with consume-log sequences seqs of
// subject lie, in order, reading each run of consecutive sequences at
// once; one that retention removed has Offset Gone. A pull locates what
// it handed out, reserves memory for the messages, then reads them with
// ReadWires. Safe on any goroutine.
func (f *FSM) LocateAll(subject string, seqs []int64) ([]MessageAt, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	cl := f.store.consumeLog(subject)
	if cl == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoSubject, subject)
	}
	ats := make([]MessageAt, 0, len(seqs))
	for i := 0; i < len(seqs); {
		n := 1
		for i+n < len(seqs) && seqs[i+n] == seqs[i]+int64(n) {
			n++
		}
		es, err := cl.GetRange(seqs[i], n)
		if errors.Is(err, logs.ErrRetained) {
			es, err = nil, nil // part of the run went: one at a time, to tell which
			for _, seq := range seqs[i : i+n] {
				e, err := cl.Get(seq)
				if errors.Is(err, logs.ErrRetained) {
					e = logs.ConsumeEntry{Offset: Gone}
				} else if err != nil {
					return nil, err
				}
				es = append(es, e)
			}
		}
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			ats = append(ats, MessageAt{Offset: e.Offset, Size: e.Size})
		}
		i += n
	}
	return ats, nil
}

// ReadWires returns the encodings of the messages at ats (from LocateAll),
// in order: the message-log records' payloads, each run of neighbouring
// records read at once. A message retention removed, or marked Gone, comes
// back nil. Safe on any goroutine.
func (f *FSM) ReadWires(ats []MessageAt) ([][]byte, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	ml := f.store.messages.Log()
	out := make([][]byte, len(ats))
	for i := 0; i < len(ats); {
		if ats[i].Offset == Gone {
			i++
			continue
		}
		sizes := []int{ats[i].Size}
		for j := i + 1; j < len(ats) && ats[j].Offset == ats[j-1].Offset+int64(ats[j-1].Size); j++ {
			sizes = append(sizes, ats[j].Size)
		}
		ps, err := ml.ReadRun(ats[i].Offset, sizes)
		if errors.Is(err, logs.ErrRetained) {
			ps, err = make([][]byte, len(sizes)), nil // part of the run went: one at a time
			for k := range ps {
				at := ats[i+k]
				ps[k], err = ml.ReadSized(at.Offset, at.Size)
				if errors.Is(err, logs.ErrRetained) {
					ps[k], err = nil, nil
				} else if err != nil {
					break
				}
			}
		}
		if err != nil {
			return nil, err
		}
		copy(out[i:], ps)
		i += len(sizes)
	}
	return out, nil
}

// LogEnds describes how far each log of the FSM reaches, for status pages
// and for comparing replicas.
type LogEnds struct {
	Applied  uint64
	Messages int64
	Pulls    int64
	Consume  map[string]int64
}

// Ends returns the current ends of every log. Safe on any goroutine.
func (f *FSM) Ends() LogEnds {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return LogEnds{Applied: f.Applied()}
	}
	e := f.store.ends(nil)
	return LogEnds{Applied: f.Applied(), Messages: e.messages, Pulls: e.pulls, Consume: e.consume}
}

// MemberAddr returns the client address recorded for node id, or "".
func (f *FSM) MemberAddr(id string) string {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	return f.st.members[id]
}

// StampedTime returns the state's clock: the newest leader-stamped time
// applied, in Unix milliseconds (0 before any). Time in the state never
// goes back, so a new leader's clock behind it means an earlier leader's
// clock ran ahead. Safe on any goroutine.
func (f *FSM) StampedTime() int64 {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	return f.st.now
}

// ConsumerID names one consumer of a group of a subject; it lives with the
// naming rule in internal/limits, which clients share without linking this
// package.
type ConsumerID = limits.ConsumerID

// Epoch returns the consumer's registration (its epoch), or 0 if it is
// not registered (it never pulled a subject with messages, or it was
// reclaimed since).
func (f *FSM) Epoch(id ConsumerID) uint64 {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	if c := f.st.byKey[consumerKey{id.Subject, id.ConsumerGroup, id.Consumer}]; c != nil {
		return c.epoch
	}
	return 0
}

// HasSubject reports whether subject has messages here (a consume log).
func (f *FSM) HasSubject(subject string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.store != nil && f.store.consumeLog(subject) != nil
}

// Consumers returns every registered consumer, in the order they
// registered: a new leader starts their sessions, so that one that went
// silent under the old leader is reclaimed (and forgotten) too.
func (f *FSM) Consumers() []ConsumerID {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	out := make([]ConsumerID, 0, len(f.st.consumers))
	for _, c := range f.st.sortedConsumers() {
		out = append(out, ConsumerID{Subject: c.key.subject, ConsumerGroup: c.key.group, Consumer: c.key.name})
	}
	return out
}

// SubjectStored is how many messages of a subject the replica stores:
// its consume-log entries kept (retention removes them a segment at a
// time, so a few may point at messages already gone), and the bytes of
// those same entries' messages (their message-log records' sizes: the
// encoded message with its record header).
type SubjectStored struct {
	Subject  string
	Messages int64
	Bytes    int64
}

// StoredBySubject returns every subject's stored messages and bytes, by
// subject: one look at each consume log's ends and at its running count
// of bytes (kept by apply and retention, recorded in each checkpoint),
// whatever it holds.
func (f *FSM) StoredBySubject() []SubjectStored {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil
	}
	// Between batches: each log's entries and bytes as of the same entry.
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	subjects := f.store.subjects()
	out := make([]SubjectStored, 0, len(subjects))
	for _, s := range subjects {
		if cl := f.store.consumeLog(s); cl != nil {
			out = append(out, SubjectStored{Subject: s, Messages: max(cl.EndSeq()-cl.StartSeq(), 0), Bytes: f.store.storedBytes(s)})
		}
	}
	return out
}

// ConsumerInFlight is a registered consumer of a group and how many
// entries it holds unacked (handed out, not finished).
type ConsumerInFlight struct {
	Name     string
	InFlight int
}

// ConsumersOf returns the registered consumers of one group, in the order
// they registered, each with what it holds in flight.
func (f *FSM) ConsumersOf(subject, group string) []ConsumerInFlight {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	var out []ConsumerInFlight
	for _, c := range f.st.sortedConsumers() {
		if c.key.subject == subject && c.key.group == group {
			out = append(out, ConsumerInFlight{Name: c.key.name, InFlight: c.unacked()})
		}
	}
	return out
}

// ConsumersWithUnacked returns the consumers holding unacked entries, in
// the order they registered.
func (f *FSM) ConsumersWithUnacked() []ConsumerID {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	var out []ConsumerID
	for _, c := range f.st.sortedConsumers() {
		if c.unacked() > 0 {
			out = append(out, ConsumerID{Subject: c.key.subject, ConsumerGroup: c.key.group, Consumer: c.key.name})
		}
	}
	return out
}

// Backlog returns how many deliveries the consumer groups this replica
// knows still owe: entries not yet handed out, due again (handed back, or
// waiting for their retry), or handed out and not finished (acked, nacked
// or timed out). Dead letters are finished. It is 0 exactly when every
// known group has acknowledged everything. A group that has never pulled a
// subject is not known here and counts nothing. It costs one step per
// group and per consumer, never per entry, so status pages and heartbeats
// do not hold up applies. Safe on any goroutine; the figure may straddle
// an apply.
func (f *FSM) Backlog() int64 {
	ends := f.Ends()
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	var n int64
	for k, g := range f.st.groups {
		n += max(0, ends.Consume[k.subject]/logs.ConsumeRecordSize-g.cursor) + int64(len(g.redeliver)) + g.retrying
	}
	for _, c := range f.st.consumers {
		n += int64(c.unacked())
	}
	return n
}

// Holds reports, for each of ids, whether this replica stored a message
// with it within the dedup window (appended, or scheduled for later), as
// an Append stamped at (milliseconds: the leader's clock) and applied now
// would find it: a leader refusing a send tells a retry of a stored
// message it is a duplicate, and the sender that the others were stored
// nowhere here (see server.refuseSend). The window ends by at or by the
// state's time, whichever is later, as apply's would: a drained group
// applies little, and its state's time alone would keep ids past their
// window. It waits for a batch being applied; an error reading or
// flushing the logs is returned, and stops the replica, as apply's own
// flush failing would.
func (f *FSM) Holds(ids []string, at int64) (held []bool, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	f.stateMu.Lock() // the lookups flush what apply wrote
	defer f.stateMu.Unlock()
	if err := f.Stopped(); err != nil {
		return nil, err
	}
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	defer func() {
		if r := recover(); r != nil {
			sf, ok := r.(storageFailure)
			if !ok {
				panic(r)
			}
			// A flush of what apply wrote failed: the replica stops, as
			// apply's own would have.
			f.stopApplying(sf.err, true)
			held, err = nil, sf.err
		}
	}()
	held = make([]bool, len(ids))
	now := max(f.st.now, at)
	for i, id := range ids {
		h := dedup.HashID(id)
		_, appended := f.isDuplicate(id, h, now)
		_, scheduled := f.isDelayedDuplicate(id, h, now)
		held[i] = appended || scheduled
	}
	return held, nil
}
