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
// Safe on any goroutine; it sees what was applied.
func (f *FSM) FindMessage(id string) ([]StoredMessage, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	ml := f.store.messages.Log()
	out := []StoredMessage{}
	var rerr error
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
		return true
	})
	if err := errors.Join(err, rerr); err != nil {
		return nil, err
	}
	return out, nil
}
