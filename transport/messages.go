package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// Payloads of each request and response body. Integers are uvarints unless
// noted; strings and byte slices are uvarint-length-prefixed; messages use
// the message-log encoding (package logs). Every payload starts with a
// version byte: 2 for pull and ack requests and pull responses (which
// carry the consumer's epoch), 1 for the others.
const (
	payloadVersion      = 1
	payloadVersionEpoch = 2
	payloadVersionPull3 = 3 // pull requests and responses: how to pull, and deliveries
)

// The decoders hold every count and name to the limits of package limits.

// SendRequest: version | count | message…
type SendRequest struct {
	Messages []*message.Message
	// Wire holds each message's encoding as it arrived (DecodeSendRequest
	// sets it; Wire[i] encodes Messages[i]), for the leader to propose
	// without encoding the messages again. Bodies and encodings alias the
	// payload decoded. Encode ignores it.
	Wire [][]byte
}

// SendStatus is the outcome of one message of a send.
type SendStatus uint8

// Send statuses. Appended, Duplicate and Scheduled all mean the message is
// stored.
const (
	SendAppended  SendStatus = 1
	SendDuplicate SendStatus = 2
	SendRejected  SendStatus = 3
	SendScheduled SendStatus = 4 // stored for delivery at its DeliverAt
)

// SendResult is one message's outcome; Error explains a rejection.
type SendResult struct {
	Status SendStatus
	Error  string
}

// SendResponse: version | count | (status u8 | error string)…
type SendResponse struct {
	Results []SendResult
}

// PullRequest: version | subject | group | consumer | max | wait-ms | from | epoch |
// [flags u8 (1 at-most-once, 2 tags-all) | tag-count | tags… | start u8 | start-at-ms | idle-expiry-ms, version 3]
//
// The server answers as soon as it has at least one message, or after
// Wait with none (a long poll). From is the next pull sequence the consumer
// expects (one past the highest it received) in its registration Epoch
// (from the last pull response; 0 at first): messages it was handed from
// there on and has not acked come again first, so a lost reply loses
// nothing. With epoch 0 they come again whatever registration holds the
// name (a restarted consumer taking over); with an epoch that has ended,
// none do (they went back to the group when it ended).
//
// Version 3 adds how the consumer pulls: only messages with any of Tags
// (TagsAll: every one of them), at most once (messages count as acked as
// they are handed out), and where its group starts if this pull creates
// it (Start, StartAt for StartAtTime) and after how long without
// consumers the group is forgotten (IdleExpiry; a broadcast consumer's
// group of its own). A version 2 request pulls as version 2 did: no tags,
// at least once, a new group at the subject's earliest message.
type PullRequest struct {
	Subject, ConsumerGroup, Consumer string
	Max                              int
	Wait                             time.Duration
	From                             int64
	Epoch                            uint64
	Version                          byte // of the payload (2 or 3); 0 encodes as 3
	AtMostOnce, TagsAll              bool
	Tags                             []string
	Start                            StartPosition
	StartAt                          time.Time // with StartAtTime
	IdleExpiry                       time.Duration
}

// StartPosition says where a new consumer group starts: the values are the
// state machine's.
type StartPosition uint8

// Start positions.
const (
	StartLatest   StartPosition = 0 // what is sent after the group first pulls (the default)
	StartEarliest StartPosition = 1 // the oldest message the broker keeps
	StartAtTime   StartPosition = 2 // the first message stored at or after StartAt
)

// PulledMessage is one message handed to a consumer; PullSeq is what it
// acks. Deliveries counts the times its group was handed it, this one
// included (version 3; 0 in a version 2 response).
type PulledMessage struct {
	PullSeq    int64
	Deliveries uint32
	Message    *message.Message
	// Wire, when set, is the message's encoding (a message-log record's
	// payload), which Encode copies instead of encoding Message; the
	// broker sets it and not Message. DecodePullResponse sets Message.
	Wire []byte
}

// PullResponse: version | epoch | count | (pull-seq | [deliveries, version 3] | message)…
//
// The response has the version of its request.
//
// Epoch is the consumer's registration, which its acks and next pulls
// name; a new one (different from the request's) means the broker
// registered the consumer afresh (its earlier session expired), its pull
// sequences from 0 again. 0 when nothing was registered (the subject has
// no messages yet).
type PullResponse struct {
	Epoch    uint64
	Messages []PulledMessage
	Version  byte // 2 or 3; 0 encodes as 3
}

// AckRequest: 2 | subject | group | consumer | epoch | count | (first | last)…
//
// Epoch (at least 1) is the registration that pulled the acknowledged
// messages: if it has ended, the ack is refused with STALE_CONSUMER and
// changes nothing (those messages went back to the group).
type AckRequest struct {
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	Ranges                           []message.AckRange
}

// AckResponse: version | ack-position
type AckResponse struct {
	AckPos int64
}

// HeartbeatRequest: version | subject | group | consumer. It keeps the
// consumer's session alive; its unacked messages are reclaimed for the rest
// of the group when heartbeats stop. The response body is empty.
type HeartbeatRequest struct {
	Subject, ConsumerGroup, Consumer string
}

func header() []byte { return []byte{payloadVersion} }

func newReader(b []byte) *binenc.Reader { return newReaderVersion(b, payloadVersion) }

// newReaderVersion returns a reader after b's version byte, or one that
// fails on its first read if the version is not want.
func newReaderVersion(b []byte, want byte) *binenc.Reader {
	r := binenc.NewReader(b)
	if v := r.Byte(); r.Err() == nil && v != want {
		return binenc.NewReader(nil)
	}
	return r
}

func done(what string, r *binenc.Reader) error {
	if err := r.Done(); err != nil {
		return Errorf(Invalid, "%s: %v", what, err)
	}
	return nil
}

// Encode returns the payload.
func (q *SendRequest) Encode() []byte {
	b := binenc.AppendUvarint(header(), uint64(len(q.Messages)))
	for _, m := range q.Messages {
		b = m.AppendEncoded(b)
	}
	return b
}

// DecodeSendRequest decodes a send payload.
func DecodeSendRequest(b []byte) (*SendRequest, error) {
	r := newReader(b)
	q := &SendRequest{}
	n := r.Count(limits.MaxBatchMessages)
	for i := 0; i < n && r.Err() == nil; i++ {
		m, wire, err := message.ReadWire(r)
		if err == nil {
			err = m.Check() // the limits of a stored message, its whole size among them
		}
		if err != nil {
			code := Invalid
			if errors.Is(err, binenc.ErrTooLong) || errors.Is(err, message.ErrTooLarge) {
				code = TooLarge // a body, property or tag above its limit, or the whole message
			}
			return nil, Errorf(code, "send: message %d: %v", i, err)
		}
		q.Messages, q.Wire = append(q.Messages, m), append(q.Wire, wire)
	}
	return q, done("send", r)
}

// Encode returns the payload.
func (p *SendResponse) Encode() []byte {
	b := binenc.AppendUvarint(header(), uint64(len(p.Results)))
	for _, res := range p.Results {
		b = append(b, byte(res.Status))
		b = binenc.AppendString(b, res.Error)
	}
	return b
}

// DecodeSendResponse decodes a send response body.
func DecodeSendResponse(b []byte) (*SendResponse, error) {
	r := newReader(b)
	p := &SendResponse{}
	n := r.Count(limits.MaxBatchMessages)
	for i := 0; i < n && r.Err() == nil; i++ {
		p.Results = append(p.Results, SendResult{Status: SendStatus(r.Byte()), Error: r.String(limits.MaxErrorText)})
	}
	return p, done("send response", r)
}

func appendNames(b []byte, subject, group, consumer string) []byte {
	return binenc.AppendString(binenc.AppendString(binenc.AppendString(b, subject), group), consumer)
}

func readNames(r *binenc.Reader) (string, string, string) {
	return r.String(limits.MaxName), r.String(limits.MaxName), r.String(limits.MaxName)
}

// Encode returns the payload.
func (q *PullRequest) Encode() []byte {
	version := byte(payloadVersionPull3)
	if q.Version == payloadVersionEpoch {
		version = payloadVersionEpoch
	}
	b := appendNames([]byte{version}, q.Subject, q.ConsumerGroup, q.Consumer)
	b = binenc.AppendUvarint(b, uint64(q.Max))
	b = binenc.AppendUvarint(b, uint64(q.Wait.Milliseconds()))
	b = binenc.AppendUvarint(b, uint64(q.From))
	b = binenc.AppendUvarint(b, q.Epoch)
	if version == payloadVersionEpoch {
		return b
	}
	flags := byte(0)
	if q.AtMostOnce {
		flags |= 1
	}
	if q.TagsAll {
		flags |= 2
	}
	b = append(b, flags)
	b = binenc.AppendUvarint(b, uint64(len(q.Tags)))
	for _, t := range q.Tags {
		b = binenc.AppendString(b, t)
	}
	b = append(b, byte(q.Start))
	startAt := int64(0)
	if q.Start == StartAtTime {
		startAt = q.StartAt.UnixMilli()
	}
	b = binenc.AppendUvarint(b, uint64(max(startAt, 0)))
	return binenc.AppendUvarint(b, uint64(q.IdleExpiry.Milliseconds()))
}

// DecodePullRequest decodes a pull payload, version 2 or 3.
func DecodePullRequest(b []byte) (*PullRequest, error) {
	r := binenc.NewReader(b)
	q := &PullRequest{Version: r.Byte()}
	if r.Err() == nil && q.Version != payloadVersionEpoch && q.Version != payloadVersionPull3 {
		return nil, Errorf(Invalid, "pull: payload version %d (2 or 3)", q.Version)
	}
	q.Subject, q.ConsumerGroup, q.Consumer = readNames(r)
	q.Max = r.Count(limits.MaxPullMessages)
	wait := r.Uvarint()
	if wait > uint64(limits.MaxPullWait/time.Millisecond) {
		return nil, Errorf(Invalid, "pull: wait of %d ms is above %s", wait, limits.MaxPullWait)
	}
	q.Wait = time.Duration(wait) * time.Millisecond
	q.From = int64(r.Uvarint())
	if q.From < 0 {
		return nil, Errorf(Invalid, "pull: from %d", q.From)
	}
	q.Epoch = r.Uvarint()
	if q.Version == payloadVersionEpoch {
		q.Start = StartEarliest // what version 2 did
		return q, done("pull", r)
	}
	flags := r.Byte()
	if r.Err() == nil && flags&^3 != 0 {
		return nil, Errorf(Invalid, "pull: unknown flags %#x", flags)
	}
	q.AtMostOnce, q.TagsAll = flags&1 != 0, flags&2 != 0
	if n := r.Count(message.MaxTags); n > 0 {
		q.Tags = make([]string, n)
		for i := range q.Tags {
			if q.Tags[i] = r.String(message.MaxTagLen); r.Err() == nil && q.Tags[i] == "" {
				return nil, Errorf(Invalid, "pull: empty tag")
			}
		}
	}
	q.Start = StartPosition(r.Byte())
	if r.Err() == nil && q.Start > StartAtTime {
		return nil, Errorf(Invalid, "pull: unknown start position %d", q.Start)
	}
	startAt := r.Uvarint()
	idle := r.Uvarint()
	if r.Err() == nil && (startAt > maxMillis || idle > maxMillis || startAt != 0 && q.Start != StartAtTime) {
		return nil, Errorf(Invalid, "pull: start time %d ms (with start position %d) or idle expiry %d ms out of range", startAt, q.Start, idle)
	}
	if q.Start == StartAtTime {
		q.StartAt = time.UnixMilli(int64(startAt))
	}
	q.IdleExpiry = time.Duration(idle) * time.Millisecond
	return q, done("pull", r)
}

// maxMillis bounds times and durations in milliseconds on the wire: about
// 292 years, so that every one converts to a time.Duration.
const maxMillis = uint64(1<<63-1) / uint64(time.Millisecond)

// Encode returns the payload.
func (p *PullResponse) Encode() []byte {
	version := p.Version
	if version == 0 {
		version = payloadVersionPull3
	}
	size := 1 + 2*binary.MaxVarintLen64
	for _, m := range p.Messages {
		size += 2*binary.MaxVarintLen64 + len(m.Wire)
	}
	b := binenc.AppendUvarint(append(make([]byte, 0, size), version), p.Epoch)
	b = binenc.AppendUvarint(b, uint64(len(p.Messages)))
	for _, m := range p.Messages {
		b = binenc.AppendUvarint(b, uint64(m.PullSeq))
		if version >= payloadVersionPull3 {
			b = binenc.AppendUvarint(b, uint64(m.Deliveries))
		}
		if m.Wire != nil {
			b = append(b, m.Wire...)
		} else {
			b = m.Message.AppendEncoded(b)
		}
	}
	return b
}

// DecodePullResponse decodes a pull response body, version 2 or 3.
func DecodePullResponse(b []byte) (*PullResponse, error) {
	r := binenc.NewReader(b)
	p := &PullResponse{Version: r.Byte()}
	if r.Err() == nil && p.Version != payloadVersionEpoch && p.Version != payloadVersionPull3 {
		return nil, Errorf(Invalid, "pull response: payload version %d (2 or 3)", p.Version)
	}
	p.Epoch = r.Uvarint()
	n := r.Count(limits.MaxPullMessages)
	for i := 0; i < n && r.Err() == nil; i++ {
		pm := PulledMessage{PullSeq: int64(r.Uvarint())}
		if p.Version >= payloadVersionPull3 {
			pm.Deliveries = uint32(min(r.Uvarint(), 1<<32-1))
		}
		m, err := message.Read(r)
		if err != nil {
			return nil, Errorf(Invalid, "pull response: message %d: %v", i, err)
		}
		pm.Message = m
		p.Messages = append(p.Messages, pm)
	}
	return p, done("pull response", r)
}

// Encode returns the payload.
func (q *AckRequest) Encode() []byte {
	b := appendNames([]byte{payloadVersionEpoch}, q.Subject, q.ConsumerGroup, q.Consumer)
	return appendRanges(binenc.AppendUvarint(b, q.Epoch), q.Ranges)
}

// DecodeAckRequest decodes an ack payload.
func DecodeAckRequest(b []byte) (*AckRequest, error) {
	r := newReaderVersion(b, payloadVersionEpoch)
	q := &AckRequest{}
	q.Subject, q.ConsumerGroup, q.Consumer = readNames(r)
	if q.Epoch = r.Uvarint(); r.Err() == nil && q.Epoch == 0 {
		return nil, Errorf(Invalid, "ack: epoch 0 (an ack names the registration that pulled its messages)")
	}
	var err error
	if q.Ranges, err = readRanges("ack", r); err != nil {
		return nil, err
	}
	return q, done("ack", r)
}

// Encode returns the payload.
func (p *AckResponse) Encode() []byte {
	return binenc.AppendUvarint(header(), uint64(p.AckPos))
}

// DecodeAckResponse decodes an ack response body.
func DecodeAckResponse(b []byte) (*AckResponse, error) {
	r := newReader(b)
	p := &AckResponse{AckPos: int64(r.Uvarint())}
	return p, done("ack response", r)
}

// Encode returns the payload.
func (q *HeartbeatRequest) Encode() []byte {
	return appendNames(header(), q.Subject, q.ConsumerGroup, q.Consumer)
}

// DecodeHeartbeatRequest decodes a heartbeat payload.
func DecodeHeartbeatRequest(b []byte) (*HeartbeatRequest, error) {
	r := newReader(b)
	q := &HeartbeatRequest{}
	q.Subject, q.ConsumerGroup, q.Consumer = readNames(r)
	return q, done("heartbeat", r)
}

// EncodeStatus encodes a response status and body.
func EncodeStatus(err error, body []byte) []byte {
	code := CodeOf(err)
	b := []byte{byte(code)}
	if code != OK {
		msg, leader := err.Error(), ""
		if e, ok := err.(*Error); ok {
			msg, leader = e.Message, e.Leader
		}
		if len(msg) > limits.MaxErrorText {
			msg = msg[:limits.MaxErrorText]
		}
		b = binenc.AppendString(b, msg)
		b = binenc.AppendString(b, leader)
	}
	return append(b, body...)
}

// DecodeStatus splits a response payload into its body and the server's
// error (an *Error), or fails with ErrMalformed.
func DecodeStatus(b []byte) ([]byte, error) {
	r := binenc.NewReader(b)
	code := Code(r.Byte())
	if code == OK && r.Err() == nil {
		return b[1:], nil
	}
	e := &Error{Code: code, Message: r.String(limits.MaxErrorText), Leader: r.String(limits.MaxAddr)}
	if r.Err() != nil {
		return nil, fmt.Errorf("%w: response status: %w", ErrMalformed, r.Err())
	}
	return nil, e
}
