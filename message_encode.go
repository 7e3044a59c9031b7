package qmq

import (
	"fmt"
	"time"

	"github.com/qmqgo/qmq/internal/message"
)

// MarshalBinary encodes m as a message to send: its id, subject, creation
// time, delivery time, tags, properties and body, in the encoding brokers
// store messages in (with no index and no append time). It is for
// keeping a message to send later, from this process or another (a
// transactional outbox keeps it in a database row). A message over a
// limit is refused with an error wrapping ErrInvalidMessage
// (ErrMessageTooLarge when too large); the subject's name and the delay
// are checked by Producer.Check and at the send.
func (m *Message) MarshalBinary() ([]byte, error) {
	w := &message.Message{ID: m.id, Subject: m.subject, CreatedAt: m.createdAt.UnixMilli(),
		Tags: m.tags, Properties: m.props, Body: m.body}
	if !m.deliverAt.IsZero() {
		w.DeliverAt = m.deliverAt.UnixMilli()
	}
	if err := w.Check(); err != nil {
		return nil, sdkError(fmt.Errorf("qmq: encode %s: %w", m.id, err))
	}
	return w.AppendEncoded(make([]byte, 0, w.EncodedSize())), nil
}

// UnmarshalBinary sets m to the message MarshalBinary encoded in p, as a
// message to send. Its id counts as chosen (as if given to SetID): it was
// fixed when the message was encoded, so every send of the decoded
// message goes to the broker group that a hash of the id names, where a
// resend within the dedup window is stored once. p must be exactly one
// such encoding: a malformed one, one with an index or an append time (a
// stored message, not one to send), or one whose id breaks SetID's rules
// is refused with an error wrapping ErrInvalidMessage or ErrInvalidID,
// and m is left as it was.
func (m *Message) UnmarshalBinary(p []byte) error {
	w, err := message.Decode(p)
	if err != nil {
		return sdkError(fmt.Errorf("qmq: decode message: %w", err))
	}
	if w.Index != 0 || w.AppendedAt != 0 {
		return sdkError(fmt.Errorf("qmq: decode message %.40q: %w: index %d and append time %d of a stored message",
			w.ID, message.ErrInvalid, w.Index, w.AppendedAt))
	}
	if err := checkID(w.ID); err != nil {
		return sdkError(fmt.Errorf("qmq: decode message: %w", err))
	}
	var deliverAt time.Time
	if w.DeliverAt != 0 {
		deliverAt = time.UnixMilli(w.DeliverAt)
	}
	m.id, m.chosenID, m.subject, m.createdAt = w.ID, true, w.Subject, time.UnixMilli(w.CreatedAt)
	m.tags, m.props, m.body, m.deliverAt = w.Tags, w.Properties, w.Body, deliverAt
	m.duplicate.Store(false)
	return nil
}
