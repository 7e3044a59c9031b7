package logs

import (
	"fmt"

	"github.com/qmqgo/qmq/internal/message"
)

// MessageLog holds every subject's messages in one log (QMQ's message
// log): appends are sequential whatever the number of subjects.
type MessageLog struct {
	log *Log
	buf []byte // reused encoding buffer; only the writer uses it
	// firstAt caches the appended-at time of each sealed segment's first
	// message, so the age rule reads it once, not on every Append.
	firstAt map[int64]int64
}

// OpenMessageLog opens (or creates) the message log in dir.
func OpenMessageLog(dir string, opts Options) (*MessageLog, error) {
	opts.FixedPayload = 0
	opts.MaxPayload = message.MaxEncoded
	l, err := Open(dir, KindMessage, opts)
	if err != nil {
		return nil, err
	}
	return &MessageLog{log: l, firstAt: map[int64]int64{}}, nil
}

// Log returns the underlying log, for Flush, Sync, retention and snapshots.
func (ml *MessageLog) Log() *Log { return ml.log }

// Append appends m and returns its offset and record size, which together
// address it for Read.
func (ml *MessageLog) Append(m *message.Message) (offset int64, size int, err error) {
	if err := m.Check(); err != nil {
		return 0, 0, err
	}
	ml.buf = m.AppendEncoded(ml.buf[:0])
	off, err := ml.log.Append(ml.buf)
	if err != nil {
		return 0, 0, err
	}
	return off, RecordSize(len(ml.buf)), nil
}

// AppendWire appends, delivered at once, the message whose encoding is wire
// (from message.ReadWire, so it decoded and passed Check), stamped with index
// and appendedAt, and returns its offset and record size. It writes what
// Append writes for that message with Index and AppendedAt set and
// DeliverAt cleared, without decoding or encoding it: the encoding is
// copied with its two stamps replaced, and a delayed message's delivery
// time is dropped (version 2 becomes version 1).
//
//	wire:   version | index | created-at | appended-at | [deliver-at] | id …
//	record: 1       | index | created-at | appendedAt  |                id …
func (ml *MessageLog) AppendWire(wire []byte, index uint64, appendedAt int64) (offset int64, size int, err error) {
	if ml.buf, err = message.AppendStamped(ml.buf[:0], wire, index, appendedAt); err != nil {
		return 0, 0, err
	}
	off, err := ml.log.Append(ml.buf)
	if err != nil {
		return 0, 0, err
	}
	return off, RecordSize(len(ml.buf)), nil
}

// Read returns the message at offset whose record size is size (both as
// returned by Append or recorded in a consume-log entry).
func (ml *MessageLog) Read(offset int64, size int) (*message.Message, error) {
	p, err := ml.log.ReadSized(offset, size)
	if err != nil {
		return nil, err
	}
	m, err := message.Decode(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s offset %d: %w", ErrCorrupt, ml.log.Dir(), offset, err)
	}
	return m, nil
}

// ReadAt returns the message at offset when its size is not known.
func (ml *MessageLog) ReadAt(offset int64) (*message.Message, error) {
	p, err := ml.log.Read(offset)
	if err != nil {
		return nil, err
	}
	m, err := message.Decode(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s offset %d: %w", ErrCorrupt, ml.log.Dir(), offset, err)
	}
	return m, nil
}

// Scan calls fn with each message from offset from to the end.
func (ml *MessageLog) Scan(from int64, fn func(offset int64, size int, m *message.Message) error) error {
	return ml.log.Scan(from, func(off int64, p []byte) error {
		m, err := message.Decode(p)
		if err != nil {
			return fmt.Errorf("%w: %s offset %d: %w", ErrCorrupt, ml.log.Dir(), off, err)
		}
		return fn(off, RecordSize(len(p)), m)
	})
}

// Retention says which sealed segments may go: those all of whose messages
// were appended before MaxAge ago, and the oldest ones while the log is
// larger than MaxBytes. A zero field disables that rule.
type Retention struct {
	MaxAge   int64 // milliseconds
	MaxBytes int64
}

// RetainFrom returns the offset before which sealed segments may be removed
// under r at time now (Unix milliseconds, leader-stamped so that every
// replica decides alike). Pass it to Log().RemoveBefore.
func (ml *MessageLog) RetainFrom(r Retention, now int64) (int64, error) {
	segs := ml.log.Segments()
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	keepFrom := segs[0].Base
	for i := 0; i < len(segs)-1; i++ {
		next := segs[i+1]
		tooBig := r.MaxBytes > 0 && total > r.MaxBytes
		tooOld := false
		if r.MaxAge > 0 && next.Size > 0 {
			// Appended-at only grows along the log, so when the first message of
			// the next segment is too old, all of this one is.
			at, err := ml.firstAppendedAt(next.Base)
			if err != nil {
				return 0, err
			}
			tooOld = at < now-r.MaxAge
		}
		if !tooBig && !tooOld {
			break
		}
		total -= segs[i].Size
		keepFrom = next.Base
	}
	return keepFrom, nil
}

// firstAppendedAt returns the appended-at time of the message at base, the
// first of its segment. Only the writer calls it.
func (ml *MessageLog) firstAppendedAt(base int64) (int64, error) {
	if at, ok := ml.firstAt[base]; ok {
		return at, nil
	}
	m, err := ml.ReadAt(base)
	if err != nil {
		return 0, err
	}
	for b := range ml.firstAt { // forget segments retention removed
		if b < ml.log.Start() {
			delete(ml.firstAt, b)
		}
	}
	ml.firstAt[base] = m.AppendedAt
	return m.AppendedAt, nil
}
