package transport

import (
	"time"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// NackRequest: version | subject | group | consumer | epoch | retry-at-ms | count | (first | last)…
//
// The consumer failed to process the messages of the ranges (pull
// sequences of registration Epoch): each comes back to its group at
// RetryAt, or, zero, after the group's backoff for how many times it was
// delivered; one delivered the group's most times becomes a dead letter.
// The response is an AckResponse.
type NackRequest struct {
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	RetryAt                          time.Time // zero: the group's backoff
	Ranges                           []message.AckRange
}

// ExtendRequest: version | subject | group | consumer | epoch | count | (first | last)…
//
// The consumer is still at work on the messages of the ranges: each gets
// its group's whole ack wait again. The response body is empty.
type ExtendRequest struct {
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	Ranges                           []message.AckRange
}

// Encode returns the payload.
func (q *NackRequest) Encode() []byte {
	b := binenc.AppendUvarint(appendNames(header(), q.Subject, q.ConsumerGroup, q.Consumer), q.Epoch)
	at := int64(0)
	if !q.RetryAt.IsZero() {
		at = max(q.RetryAt.UnixMilli(), 1)
	}
	return appendRanges(binenc.AppendUvarint(b, uint64(at)), q.Ranges)
}

// DecodeNackRequest decodes a nack payload.
func DecodeNackRequest(b []byte) (*NackRequest, error) {
	r := newReader(b)
	q := &NackRequest{}
	q.Subject, q.ConsumerGroup, q.Consumer = readNames(r)
	q.Epoch = r.Uvarint()
	at := r.Uvarint()
	if r.Err() == nil && (q.Epoch == 0 || at > maxMillis) {
		return nil, Errorf(Invalid, "nack: epoch %d (at least 1), retry time %d ms", q.Epoch, at)
	}
	if at > 0 {
		q.RetryAt = time.UnixMilli(int64(at))
	}
	var err error
	if q.Ranges, err = readRanges("nack", r); err != nil {
		return nil, err
	}
	return q, done("nack", r)
}

// Encode returns the payload.
func (q *ExtendRequest) Encode() []byte {
	b := binenc.AppendUvarint(appendNames(header(), q.Subject, q.ConsumerGroup, q.Consumer), q.Epoch)
	return appendRanges(b, q.Ranges)
}

// DecodeExtendRequest decodes an extend payload.
func DecodeExtendRequest(b []byte) (*ExtendRequest, error) {
	r := newReader(b)
	q := &ExtendRequest{}
	q.Subject, q.ConsumerGroup, q.Consumer = readNames(r)
	if q.Epoch = r.Uvarint(); r.Err() == nil && q.Epoch == 0 {
		return nil, Errorf(Invalid, "extend: epoch 0 (it names the registration that pulled its messages)")
	}
	var err error
	if q.Ranges, err = readRanges("extend", r); err != nil {
		return nil, err
	}
	return q, done("extend", r)
}

func appendRanges(b []byte, ranges []message.AckRange) []byte {
	b = binenc.AppendUvarint(b, uint64(len(ranges)))
	for _, rg := range ranges {
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, uint64(rg.First)), uint64(rg.Last))
	}
	return b
}

// readRanges reads a count and that many ranges, each First <= Last.
func readRanges(what string, r *binenc.Reader) ([]message.AckRange, error) {
	n := r.Count(limits.MaxAckRanges)
	out := make([]message.AckRange, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		rg := message.AckRange{First: int64(r.Uvarint()), Last: int64(r.Uvarint())}
		if r.Err() == nil && (rg.First < 0 || rg.Last < rg.First) {
			return nil, Errorf(Invalid, "%s: range %d..%d", what, rg.First, rg.Last)
		}
		out = append(out, rg)
	}
	return out, nil
}
