package fsm

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// Retries go through the schedule log, the path delayed messages take:
// a nacked message becomes a small schedule record due at its retry time,
// which the leader's wheel fires like any other. Firing it puts the
// message back on its group's redelivery queue (that group only, and only
// in the life that scheduled it), so a retry is never early, is handed out
// once, and costs a record of its names rather than a copy of the message.

// retrySubject marks a retry record. No message can have it: a subject
// starts with a letter or a digit.
const retrySubject = "%retry"

// A retry record's message body:
//
//	subject | group | seq uvarint | deliveries uvarint | gen uvarint
type retryRecord struct {
	subject, group string
	r              redelivery
	gen            uint64
}

func (rr retryRecord) encode() []byte {
	b := binenc.AppendString(nil, rr.subject)
	b = binenc.AppendString(b, rr.group)
	b = binenc.AppendUvarint(b, uint64(rr.r.seq))
	b = binenc.AppendUvarint(b, uint64(rr.r.deliveries))
	return binenc.AppendUvarint(b, rr.gen)
}

// message returns the schedule message carrying the record, due at at.
func (rr retryRecord) message(at, now int64) *message.Message {
	return &message.Message{ID: "retry", Subject: retrySubject, CreatedAt: now, AppendedAt: now, DeliverAt: at, Body: rr.encode()}
}

// maxRetryRecordBytes is the most a retry record takes in the schedule:
// names as long as names go, every number at its widest.
var maxRetryRecordBytes = delaywheel.RecordSize(retryRecord{
	subject: strings.Repeat("s", limits.MaxName), group: strings.Repeat("g", limits.MaxName),
	r: redelivery{seq: math.MaxInt64, deliveries: limits.MaxDeliveries}, gen: math.MaxUint64,
}.message(math.MaxInt64, math.MaxInt64))

func decodeRetryRecord(body []byte) (retryRecord, error) {
	r := binenc.NewReader(body)
	rr := retryRecord{subject: r.String(limits.MaxName), group: r.String(limits.MaxName)}
	rr.r.seq = int64(r.Uvarint())
	rr.r.deliveries = uint32(min(r.Uvarint(), limits.MaxDeliveries))
	rr.gen = r.Uvarint()
	if err := r.Done(); err != nil {
		return rr, fmt.Errorf("%w: retry record: %w", ErrBadCommand, err)
	}
	return rr, nil
}

// scheduleRetry writes a retry record due at at; false if its hour is full
// or past the last hour a schedule reference can name (the same on every
// replica), when the caller hands the entry out again at once instead.
func (f *FSM) scheduleRetry(k groupKey, g *group, r redelivery, at, now int64) bool {
	if !delaywheel.ValidHour(delaywheel.Hour(at)) {
		return false
	}
	m := retryRecord{subject: k.subject, group: k.group, r: r, gen: g.gen}.message(at, now)
	ref, err := f.store.sched.Append(at, m)
	if errors.Is(err, delaywheel.ErrHourFull) {
		return false
	}
	must(0, err)
	f.pend(delaywheel.Hour(at), delaywheel.Entry{At: at, Ref: ref, Size: int32(delaywheel.RecordSize(m))})
	f.st.retries++
	g.retrying++
	return true
}

// fireRetry puts a fired retry record's entry back on its group's
// redelivery queue, unless the group is gone or was reset since (the
// record's life is over), or retention removed the message meanwhile. It
// returns the subject to wake pulls of ("" for none).
func (f *FSM) fireRetry(m *message.Message) string {
	f.st.retries--
	rr, err := decodeRetryRecord(m.Body)
	if err != nil {
		f.log.Error("dropping an unreadable retry record", "error", err)
		return ""
	}
	g := f.st.groups[groupKey{rr.subject, rr.group}]
	if g == nil || g.gen != rr.gen {
		return ""
	}
	g.retrying--
	if rr.r.seq < f.retainedStart(rr.subject) {
		g.lost++
		return ""
	}
	g.redeliver = append(g.redeliver, rr.r)
	return rr.subject
}
