package fsm

import (
	"errors"

	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// FindMessage returns every retained message whose id is id, newest
// first, each read and confirmed (the index's fingerprints may collide),
// with its sequence in its subject's consume log (-1 if it has none). Not
// found is an empty slice and a nil error; while the index of a segment
// is still being built after open the error wraps logs.ErrIndexBuilding.
// It stops after maxResults messages (0: no bound), and before a message
// that would take the record sizes of those found past maxBytes (0: no
// bound; the first is always returned), so that an id a producer reused
// for many large messages costs a bounded read.
// Safe on any goroutine; it sees what was applied.
func (f *FSM) FindMessage(id string, maxResults, maxBytes int) ([]StoredMessage, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	ml := f.store.messages.Log()
	out := []StoredMessage{}
	var rerr error
	read := 0
	err := f.store.index.Lookup(dedup.HashID(id), func(off int64) bool {
		if off >= ml.End() {
			return true // appended by the batch being applied: not visible yet
		}
		p, err := ml.Read(off)
		if errors.Is(err, logs.ErrRetained) {
			return true
		}
		if err != nil {
			rerr = err
			return false
		}
		if maxBytes > 0 && len(out) > 0 && read+logs.RecordSize(len(p)) > maxBytes {
			return false
		}
		m, err := message.Decode(p)
		if err != nil {
			rerr = err
			return false
		}
		if m.ID != id {
			return true
		}
		seq := int64(-1)
		if cl := f.store.consumeLog(m.Subject); cl != nil {
			if seq, err = cl.SeqOf(off); err != nil && !errors.Is(err, logs.ErrRetained) {
				rerr = err
				return false
			}
		}
		out = append(out, StoredMessage{Offset: off, Size: logs.RecordSize(len(p)), Seq: seq, Message: m})
		read += logs.RecordSize(len(p))
		return maxResults <= 0 || len(out) < maxResults
	})
	if err := errors.Join(err, rerr); err != nil {
		return nil, err
	}
	return out, nil
}
