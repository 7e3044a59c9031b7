package fsm

import (
	"fmt"

	"github.com/qmqgo/qmq/logs"
)

// ErrNoSubject means a subject has no messages on this broker group.
var ErrNoSubject = fmt.Errorf("%w: no such subject", logs.ErrBeyondEnd)

// Message reads the message with consume-log sequence seq of subject, as
// a pull handed it out. Safe on any goroutine; it sees what was applied.
func (f *FSM) Message(subject string, seq int64) (*logs.Message, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return nil, logs.ErrClosed
	}
	cl := f.store.consumeLog(subject)
	if cl == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoSubject, subject)
	}
	e, err := cl.Get(seq)
	if err != nil {
		return nil, err
	}
	return f.store.messages.Read(e.Offset, e.Size)
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
	e := f.store.ends()
	return LogEnds{Applied: f.Applied(), Messages: e.messages, Pulls: e.pulls, Consume: e.consume}
}
