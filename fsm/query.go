package fsm

import (
	"errors"
	"fmt"
	"slices"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// maxQueryStartTries bounds the attempts to find a query's first sequence
// while retention removes the entries the search reads: each failed one
// means another removal, so a few suffice.
const maxQueryStartTries = 8

// checkQuery reports whether q is within its bounds: a valid subject, a
// Limit of 1..limits.MaxQueryResults, a Budget of 0 or 1..limits.MaxScanBudget,
// a time window that starts at or after the epoch and ends (if it does)
// after it starts, a tag and a key of a length a message may carry.
func checkQuery(q *MessageQuery) error {
	if err := CheckName("subject", q.Subject); err != nil {
		return err
	}
	switch {
	case q.Limit < 1 || q.Limit > limits.MaxQueryResults:
		return fmt.Errorf("%w: query limit %d (1..%d)", ErrInvalid, q.Limit, limits.MaxQueryResults)
	case q.Budget < 0 || q.Budget > limits.MaxScanBudget:
		return fmt.Errorf("%w: query budget %d (0 for %d, or 1..%d)", ErrInvalid, q.Budget, limits.DefaultScanBudget, limits.MaxScanBudget)
	case q.Since < 0:
		return fmt.Errorf("%w: query since %d before the epoch", ErrInvalid, q.Since)
	case q.Until != 0 && q.Until <= q.Since:
		return fmt.Errorf("%w: query until %d not after since %d", ErrInvalid, q.Until, q.Since)
	case len(q.Tag) > message.MaxTagLen:
		return fmt.Errorf("%w: query tag length %d (1..%d)", ErrInvalid, len(q.Tag), message.MaxTagLen)
	case len(q.Key) > message.MaxPropertyVal:
		return fmt.Errorf("%w: query key length %d (at most %d)", ErrInvalid, len(q.Key), message.MaxPropertyVal)
	case len(q.Property) > message.MaxPropertyKey:
		return fmt.Errorf("%w: query property name length %d (at most %d)", ErrInvalid, len(q.Property), message.MaxPropertyKey)
	case len(q.PropertyValue) > message.MaxPropertyVal:
		return fmt.Errorf("%w: query property value length %d (at most %d)", ErrInvalid, len(q.PropertyValue), message.MaxPropertyVal)
	case q.Property == "" && q.PropertyValue != "":
		return fmt.Errorf("%w: a query property value without a property name", ErrInvalid)
	}
	return nil
}

// QueryMessages returns the messages of q.Subject that q selects, in
// consume-log order, without consuming them: it reads the logs only, and
// creates no group, registers no consumer, writes no record and proposes
// nothing. It starts at q.FromSeq (at least the first retained sequence)
// or else at the first entry appended at or after q.Since (a binary search
// on the consume log's append times, as a group starting at a time finds
// its cursor), and reads the consume log forward a run at a time until
// q.Until, the log's end, q.Limit matches or its budget of entries. A tag
// is checked on the entry's tag mask first (a miss costs no read of the
// message) and confirmed on the message's tags; a key on the message's
// message.KeyProperty. A message retention removed meanwhile is passed
// over. An unknown subject has no messages: an empty result, Next -1.
//
// Safe on any goroutine while the FSM applies: it sees what was applied
// (the logs' published ends) and holds the store's read lock one run at a
// time, so a Restore waits for one run at most, never for a whole query.
func (f *FSM) QueryMessages(q MessageQuery) (*MessageQueryResult, error) {
	if err := checkQuery(&q); err != nil {
		return nil, err
	}
	s := &queryScan{f: f, q: &q, budget: q.Budget, res: &MessageQueryResult{Next: -1}}
	if s.budget == 0 {
		s.budget = limits.DefaultScanBudget
	}
	if q.Tag != "" {
		s.filter = newTagFilter([]string{q.Tag}, false)
	}
	seq, err := f.queryStart(&q)
	if err != nil || seq < 0 {
		return s.res, err
	}
	for {
		var done bool
		if seq, done, err = s.run(seq); err != nil {
			return nil, err
		}
		if done {
			return s.res, nil
		}
	}
}

// queryScan is one query's scan of its subject's consume log.
type queryScan struct {
	f      *FSM
	q      *MessageQuery
	filter *tagFilter // nil for any tag
	budget int
	bytes  int // record sizes of the messages found
	res    *MessageQueryResult
}

// queryStart returns the sequence q starts at, or -1 if its subject has no
// consume log.
func (f *FSM) queryStart(q *MessageQuery) (int64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return 0, logs.ErrClosed
	}
	cl := f.store.consumeLog(q.Subject)
	if cl == nil {
		return -1, nil
	}
	var err error
	for range maxQueryStartTries {
		var from, seq int64
		if from, err = f.retainedFrom(cl); err != nil {
			if errors.Is(err, logs.ErrRetained) {
				continue
			}
			return 0, err
		}
		from = max(from, q.FromSeq)
		if q.Since == 0 {
			return from, nil
		}
		// From a sequence on, Since still bounds the window: the entries
		// before it in time are passed over by the search, not read one by one.
		seq, err = cl.Search(from, func(e logs.ConsumeEntry) bool { return e.AppendedAt >= q.Since })
		if !errors.Is(err, logs.ErrRetained) {
			return seq, err
		}
	}
	return 0, err
}

// retainedFrom returns the first sequence of cl whose message is still in
// the message log, as firstRetained does, without its cache: that is the
// apply goroutine's, and a reader must not write it.
func (f *FSM) retainedFrom(cl *logs.ConsumeLog) (int64, error) {
	if f.store.messages.Log().Start() == 0 {
		return cl.StartSeq(), nil
	}
	return cl.SeqAtOrAfter(f.store.messages.Log().Start())
}

// run reads one run of entries from seq on, under the store's read lock,
// and returns the sequence to go on from and whether the query is done
// (its result then complete, Next and Truncated set).
func (s *queryScan) run(seq int64) (int64, bool, error) {
	f, q, res := s.f, s.q, s.res
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.store == nil {
		return 0, true, logs.ErrClosed
	}
	cl := f.store.consumeLog(q.Subject)
	if cl == nil {
		return 0, true, nil
	}
	end := cl.EndSeq()
	if res.End == 0 {
		res.End = end
	}
	if seq >= end {
		return seq, true, nil // the log's end: nothing more
	}
	if res.Scanned >= s.budget {
		// Out of budget: truncated, unless the next entry is past the
		// window (then the window was read whole; one more read says so).
		if q.Until != 0 {
			if es, err := cl.GetRange(seq, 1); err == nil && len(es) == 1 && es[0].AppendedAt >= q.Until {
				return seq, true, nil
			}
		}
		res.Next, res.Truncated = seq, true
		return seq, true, nil
	}
	n := int(min(end-seq, maxReadRun, int64(s.budget-res.Scanned)))
	es, err := cl.GetRange(seq, n)
	if errors.Is(err, logs.ErrRetained) {
		// Retention removed consume-log entries from under the run: go on
		// from what it kept.
		from, err := f.retainedFrom(cl)
		if err != nil && !errors.Is(err, logs.ErrRetained) {
			return 0, true, err
		}
		return max(seq, from, cl.StartSeq()), false, nil
	}
	if err != nil {
		return 0, true, err
	}
	for i, e := range es {
		res.Scanned++
		if q.Until != 0 && e.AppendedAt >= q.Until {
			return seq, true, nil // the window's end: append times never go back
		}
		sm, ok, err := s.match(e, seq)
		if err != nil {
			return 0, true, err
		}
		seq++
		if !ok {
			continue
		}
		if q.MaxBytes > 0 && len(res.Messages) > 0 && s.bytes+sm.Size > q.MaxBytes {
			res.Next = sm.Seq // the rest on the next page
			return sm.Seq, true, nil
		}
		s.bytes += sm.Size
		res.Messages = append(res.Messages, sm)
		if len(res.Messages) == q.Limit {
			// The window may hold more unless it ends here: at the log's
			// end, or at Until, when the next entry is read already.
			more := seq < end
			if more && i+1 < len(es) && q.Until != 0 && es[i+1].AppendedAt >= q.Until {
				more = false
			}
			if more {
				res.Next = seq
			}
			return seq, true, nil
		}
	}
	return seq, false, nil
}

// match reports whether the message of entry e (sequence seq) is one the
// query selects, and returns it: a tag the entry's mask lacks costs no
// read; a message retention removed is no match.
func (s *queryScan) match(e logs.ConsumeEntry, seq int64) (StoredMessage, bool, error) {
	if s.filter != nil && e.TagMask&s.filter.mask == 0 {
		return StoredMessage{}, false, nil
	}
	m, err := s.f.store.messages.Read(e.Offset, e.Size)
	if errors.Is(err, logs.ErrRetained) {
		return StoredMessage{}, false, nil
	}
	if err != nil {
		return StoredMessage{}, false, err
	}
	if s.filter != nil && !slices.Contains(m.Tags, s.q.Tag) {
		return StoredMessage{}, false, nil // another tag sharing the bit
	}
	if s.q.Key != "" {
		if v, _ := propertyOf(m, message.KeyProperty); v != s.q.Key {
			return StoredMessage{}, false, nil
		}
	}
	if s.q.Property != "" {
		if v, ok := propertyOf(m, s.q.Property); !ok || v != s.q.PropertyValue {
			return StoredMessage{}, false, nil
		}
	}
	return StoredMessage{Offset: e.Offset, Size: e.Size, Seq: seq, Message: m}, true, nil
}

// propertyOf returns the value of m's property name (the first, as the
// SDK's Message.Property reads it) and whether it has one.
func propertyOf(m *message.Message, name string) (string, bool) {
	for _, p := range m.Properties {
		if p.Key == name {
			return p.Value, true
		}
	}
	return "", false
}
