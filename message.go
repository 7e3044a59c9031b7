package qmq

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/qmqgo/qmq/internal/message"
)

// Message is one message: a subject, typed properties, tags and a body.
// Producers make them with GenerateMessage; consumers receive them.
// Properties travel as strings; the typed setters and getters convert.
type Message struct {
	id        string
	subject   string
	createdAt time.Time
	tags      []string
	props     []message.Property
	body      []byte
	deliverAt time.Time   // zero: at once
	chosenID  bool        // the id came from SetID
	duplicate atomic.Bool // the last send was answered as a duplicate

	pullSeq     int64   // set on received messages: what the consumer acks
	epoch       uint64  // set on received messages: the registration that pulled it
	brokerGroup string  // set on received messages: the group it came from
	puller      *Puller // set on received messages: who pulled it
	deliveries  uint32  // set on received messages: times its group was handed it
	atMostOnce  bool    // set on received messages: pulled at most once, nothing to settle
}

// ID returns the message's id: one GenerateMessage made, unique without
// coordination, or one given to SetID. The broker deduplicates sends by
// it.
func (m *Message) ID() string { return m.id }

// SetID gives the message an id of the caller's choosing, in place of the
// one GenerateMessage made: 1 to MaxIDLen (128) bytes, each a
// printable ASCII character other than a space ('!' to '~'). Any other id
// is refused with an error wrapping ErrInvalidID, and the message keeps
// its id.
//
// The broker stores a message once per id: a second send of the same id,
// from this Producer or another (a resend from another process after a
// crash, say), is answered as a duplicate and stores nothing, as long as
// the first is within the dedup window of the broker group that stored it
// (10 minutes by default). A message with a chosen id goes to the subject's
// broker group that a hash of the id names, so two Producers that see the
// same route send it to the same group; a send made while the route
// differs (a group added, drained or down in between) may be stored in
// another group as well. The id is unique across subjects: a message of
// another subject with the same id is a duplicate too. Duplicate reports
// how the last send was answered.
func (m *Message) SetID(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	m.id, m.chosenID = id, true
	return nil
}

// Duplicate reports whether the last send of m was answered as a
// duplicate: the broker group already held a message with m's id, stored
// within its dedup window, so this send stored nothing. It is true too
// when a retry of this same send found its own first attempt stored (the
// answer to that attempt was lost).
func (m *Message) Duplicate() bool { return m.duplicate.Load() }

// Subject returns the message's subject.
func (m *Message) Subject() string { return m.subject }

// CreatedAt returns when the producer generated the message.
func (m *Message) CreatedAt() time.Time { return m.createdAt }

// BrokerGroup returns the broker group a received message came from; ""
// for a message being sent.
func (m *Message) BrokerGroup() string { return m.brokerGroup }

// Deliveries returns how many times the consumer group was handed a
// received message, this time included: 1 on its first delivery, more
// when it comes again (a nack, a handler's error, an ack wait that passed,
// a consumer that went away). 0 for a message being sent.
func (m *Message) Deliveries() int { return int(m.deliveries) }

// InProgress tells the broker that a received message is still being
// processed: its group's whole ack wait starts again from now, so that it
// is not handed to another consumer meanwhile. A long handler calls it
// within each ack wait (30 s by default). It does nothing for a message
// pulled at most once; for a message not received it is an error. An
// error wrapping ErrStaleAck means the consumer's session had expired: the
// message went back to the group.
func (m *Message) InProgress(ctx context.Context) error {
	if m.puller == nil {
		return fmt.Errorf("qmq: in progress %s: not a received message", m.id)
	}
	if m.atMostOnce {
		return nil
	}
	return sdkError(m.puller.extend(ctx, m))
}

// Body returns the message's body.
func (m *Message) Body() []byte { return m.body }

// SetBody sets the message's body.
func (m *Message) SetBody(b []byte) { m.body = b }

// Tags returns the message's tags.
func (m *Message) Tags() []string { return m.tags }

// AddTag adds a tag (at most MaxTags per message, each 1 to MaxTagLen
// bytes).
func (m *Message) AddTag(tag string) { m.tags = append(m.tags, tag) }

// SetString sets a string property, replacing any earlier value.
func (m *Message) SetString(key, value string) {
	for i := range m.props {
		if m.props[i].Key == key {
			m.props[i].Value = value
			return
		}
	}
	m.props = append(m.props, message.Property{Key: key, Value: value})
}

// SetInt sets an integer property.
func (m *Message) SetInt(key string, v int64) { m.SetString(key, strconv.FormatInt(v, 10)) }

// SetBool sets a boolean property.
func (m *Message) SetBool(key string, v bool) { m.SetString(key, strconv.FormatBool(v)) }

// SetTime sets a time property (RFC 3339 with nanoseconds).
func (m *Message) SetTime(key string, v time.Time) { m.SetString(key, v.Format(time.RFC3339Nano)) }

// SetKey sets the message's business key (an order number, an account):
// the property "qmq.key", by which a query selects a
// subject's messages (at most MaxPropertyValueLen bytes, like any property).
func (m *Message) SetKey(key string) { m.SetString(message.KeyProperty, key) }

// Key returns the message's business key (SetKey), or "" if it has none.
func (m *Message) Key() string { return m.String(message.KeyProperty) }

// Property returns a property's value and whether it is set.
func (m *Message) Property(key string) (string, bool) {
	for _, p := range m.props {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// String returns a property, or "" if it is not set.
func (m *Message) String(key string) string {
	v, _ := m.Property(key)
	return v
}

// Int returns an integer property; an error if it is missing or not an integer.
func (m *Message) Int(key string) (int64, error) {
	v, err := m.typed(key)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("qmq: property %q is not an integer: %w", key, err)
	}
	return n, nil
}

// Bool returns a boolean property; an error if it is missing or not a boolean.
func (m *Message) Bool(key string) (bool, error) {
	v, err := m.typed(key)
	if err != nil {
		return false, err
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("qmq: property %q is not a boolean: %w", key, err)
	}
	return b, nil
}

// Time returns a time property; an error if it is missing or not a time.
func (m *Message) Time(key string) (time.Time, error) {
	v, err := m.typed(key)
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("qmq: property %q is not an RFC 3339 time: %w", key, err)
	}
	return t, nil
}

func (m *Message) typed(key string) (string, error) {
	v, ok := m.Property(key)
	if !ok {
		return "", fmt.Errorf("qmq: property %q is not set", key)
	}
	return v, nil
}

// Properties returns the message's properties as a map.
func (m *Message) Properties() map[string]string {
	out := make(map[string]string, len(m.props))
	for _, p := range m.props {
		out[p.Key] = p.Value
	}
	return out
}

// SetDelay delays the message's delivery by d from now: consumers get it
// no earlier than that. It sets the delivery time once, so a send retried
// later keeps it. Zero or negative: at once.
func (m *Message) SetDelay(d time.Duration) { m.SetDeliverAt(time.Now().Add(d)) }

// SetDeliverAt delays the message's delivery until t (to the millisecond),
// up to the producer's maximum delay ahead (two years by default). A time
// already past is delivered at once; the zero time clears the delay.
func (m *Message) SetDeliverAt(t time.Time) { m.deliverAt = t }

// DeliverAt returns when the message is to be delivered: the zero time for
// at once. On a received message it is the time it was scheduled for.
func (m *Message) DeliverAt() time.Time { return m.deliverAt }

// toLog returns the message as sent at now: a delivery time not after now
// is sent as none.
func (m *Message) toLog(now time.Time) *message.Message {
	l := &message.Message{ID: m.id, Subject: m.subject, CreatedAt: m.createdAt.UnixMilli(),
		Tags: m.tags, Properties: m.props, Body: m.body}
	if m.deliverAt.After(now) {
		l.DeliverAt = m.deliverAt.UnixMilli()
	}
	return l
}

func fromLog(l *message.Message, pullSeq int64, epoch uint64, brokerGroup string) *Message {
	m := &Message{id: l.ID, subject: l.Subject, createdAt: time.UnixMilli(l.CreatedAt),
		tags: l.Tags, props: l.Properties, body: l.Body, pullSeq: pullSeq, epoch: epoch, brokerGroup: brokerGroup}
	if l.DeliverAt != 0 {
		m.deliverAt = time.UnixMilli(l.DeliverAt)
	}
	return m
}
