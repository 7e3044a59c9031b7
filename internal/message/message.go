package message

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
)

// Limits of one message's fields, enforced by Check and by the decoder.
// Check also holds the whole encoding to limits.MaxMessage, which is what
// lets a stored message fit every frame and record it travels in.
const (
	MaxIDLen       = 128
	MaxSubjectLen  = limits.MaxName
	MaxTags        = 10
	MaxTagLen      = 128
	MaxProperties  = 256
	MaxPropertyKey = 256
	MaxPropertyVal = 64 << 10
	MaxBodyLen     = 8 << 20
)

// KeyProperty is the property that holds a message's business key (an
// order number, an account): a query can select a subject's messages by
// it. The SDK sets it with Message.SetKey.
const KeyProperty = "qmq.key"

// The first byte of every encoded message: version 2 adds a delivery time
// and is used only for messages that have one, so that every message has
// exactly one encoding.
const (
	messageVersion        = 1
	messageVersionDelayed = 2
)

// MaxEncoded bounds one encoded message as the decoder reads it: the body
// plus every other field at its limit. Check holds a message to be sent to
// the smaller limits.MaxMessage; a message stored under an earlier total
// limit still reads.
const MaxEncoded = MaxBodyLen + 1<<20 + MaxProperties*(MaxPropertyKey+MaxPropertyVal+8)

// The fixed fields at the start of every message's encoding (see Message).
const (
	wireCreatedAt    = 9  // created-at i64
	wireAppendedAt   = 17 // appended-at i64
	wireDeliverAt    = 25 // deliver-at i64, version 2 only
	wireFixedDelayed = 33 // where version 2's id begins
)

// ErrInvalid means a message breaks one of the limits above or its
// encoding is malformed.
var ErrInvalid = errors.New("message: invalid")

// ErrTooLarge means a message's encoding is over limits.MaxMessage
// bytes (or one of its fields over its own limit). It wraps
// ErrInvalid.
var ErrTooLarge = fmt.Errorf("%w: too large", ErrInvalid)

// Property is one key/value pair of a message. A message keeps its
// properties in the order the producer set them.
type Property struct {
	Key, Value string
}

// Message is one record of the message log.
//
// Encoding (all integers little-endian, strings uvarint-length-prefixed):
//
//	version u8 | index u64 | created-at i64 | appended-at i64 |
//	[deliver-at i64, version 2 only] | id | subject |
//	tag-count uvarint | tags… | property-count uvarint | (key, value)… | body
type Message struct {
	Index      uint64 // Raft index of the command that appended it
	ID         string // producer-chosen, unique within the dedup window
	Subject    string
	CreatedAt  int64 // producer's clock, Unix milliseconds
	AppendedAt int64 // leader-stamped, Unix milliseconds
	DeliverAt  int64 // when to deliver it, Unix milliseconds; 0 for at once
	Tags       []string
	Properties []Property
	Body       []byte
}

// Check reports whether m may be sent and stored: every field within its
// limit, and the whole encoding within limits.MaxMessage. Producers, the
// leader and the state machine all check with it.
func (m *Message) Check() error {
	if err := m.checkFields(); err != nil {
		return err
	}
	if n := m.EncodedSize(); n > limits.MaxMessage {
		return fmt.Errorf("%w: %d bytes encoded (at most %d)", ErrTooLarge, n, limits.MaxMessage)
	}
	return nil
}

// checkFields reports whether every field of m is within its limit. The
// decoder checks only this much, so that a message stored under an earlier
// total limit still reads.
func (m *Message) checkFields() error {
	switch {
	case m.DeliverAt < 0:
		return fmt.Errorf("%w: delivery time %d before the epoch", ErrInvalid, m.DeliverAt)
	case m.ID == "" || len(m.ID) > MaxIDLen:
		return fmt.Errorf("%w: id length %d (1..%d)", ErrInvalid, len(m.ID), MaxIDLen)
	case m.Subject == "" || len(m.Subject) > MaxSubjectLen:
		return fmt.Errorf("%w: subject length %d (1..%d)", ErrInvalid, len(m.Subject), MaxSubjectLen)
	case len(m.Tags) > MaxTags:
		return fmt.Errorf("%w: %d tags (at most %d)", ErrInvalid, len(m.Tags), MaxTags)
	case len(m.Properties) > MaxProperties:
		return fmt.Errorf("%w: %d properties (at most %d)", ErrInvalid, len(m.Properties), MaxProperties)
	case len(m.Body) > MaxBodyLen:
		return fmt.Errorf("%w: body of %d bytes (at most %d)", ErrTooLarge, len(m.Body), MaxBodyLen)
	}
	for _, t := range m.Tags {
		if t == "" || len(t) > MaxTagLen {
			return fmt.Errorf("%w: tag length %d (1..%d)", ErrInvalid, len(t), MaxTagLen)
		}
	}
	for _, p := range m.Properties {
		if p.Key == "" || len(p.Key) > MaxPropertyKey || len(p.Value) > MaxPropertyVal {
			return fmt.Errorf("%w: property %.40q: key length %d (1..%d), value length %d (at most %d)",
				ErrInvalid, p.Key, len(p.Key), MaxPropertyKey, len(p.Value), MaxPropertyVal)
		}
	}
	return nil
}

// AppendEncoded appends m's encoding to b. Call Check first: the encoder
// does not validate.
func (m *Message) AppendEncoded(b []byte) []byte {
	version := byte(messageVersion)
	if m.DeliverAt != 0 {
		version = messageVersionDelayed
	}
	b = append(b, version)
	b = binenc.AppendUint64(b, m.Index)
	b = binenc.AppendUint64(b, uint64(m.CreatedAt))
	b = binenc.AppendUint64(b, uint64(m.AppendedAt))
	if m.DeliverAt != 0 {
		b = binenc.AppendUint64(b, uint64(m.DeliverAt))
	}
	b = binenc.AppendString(b, m.ID)
	b = binenc.AppendString(b, m.Subject)
	b = binenc.AppendUvarint(b, uint64(len(m.Tags)))
	for _, t := range m.Tags {
		b = binenc.AppendString(b, t)
	}
	b = binenc.AppendUvarint(b, uint64(len(m.Properties)))
	for _, p := range m.Properties {
		b = binenc.AppendString(b, p.Key)
		b = binenc.AppendString(b, p.Value)
	}
	return binenc.AppendBytes(b, m.Body)
}

// Decode decodes one message that fills p exactly. The result owns
// its memory (it does not alias p).
func Decode(p []byte) (*Message, error) {
	r := binenc.NewReader(p)
	m, err := Read(r)
	if err != nil {
		return nil, err
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return m, nil
}

// Read decodes one message from r, leaving r after it; command
// decoders use it to read messages embedded in a batch. The Reader refuses
// overlong varints, so a message has exactly one encoding. The result owns
// its memory.
func Read(r *binenc.Reader) (*Message, error) { return read(r, false) }

// ReadWire decodes one message from r like Read and also
// returns its encoding: the bytes of r it was read from, which, since a
// message has exactly one encoding, are m.AppendEncoded(nil). The body and
// the encoding alias r's buffer, which must not change while either is in
// use. The leader and the state machine use it to store a message in the
// form it arrived in (see logs.MessageLog.AppendWire) instead of encoding it
// again.
func ReadWire(r *binenc.Reader) (m *Message, wire []byte, err error) {
	start := r.Offset()
	if m, err = read(r, true); err != nil {
		return nil, nil, err
	}
	return m, r.Since(start), nil
}

func read(r *binenc.Reader, shareBody bool) (*Message, error) {
	v := r.Byte()
	if r.Err() == nil && v != messageVersion && v != messageVersionDelayed {
		return nil, fmt.Errorf("%w: unknown version %d", ErrInvalid, v)
	}
	m := &Message{Index: r.Uint64(), CreatedAt: r.Int64(), AppendedAt: r.Int64()}
	if v == messageVersionDelayed {
		if m.DeliverAt = r.Int64(); r.Err() == nil && m.DeliverAt == 0 {
			return nil, fmt.Errorf("%w: version 2 without a delivery time", ErrInvalid)
		}
	}
	m.ID, m.Subject = r.String(MaxIDLen), r.String(MaxSubjectLen)
	if n := r.Count(MaxTags); n > 0 {
		m.Tags = make([]string, n)
		for i := range m.Tags {
			m.Tags[i] = r.String(MaxTagLen)
		}
	}
	if n := r.Count(MaxProperties); n > 0 {
		m.Properties = make([]Property, n)
		for i := range m.Properties {
			m.Properties[i] = Property{Key: r.String(MaxPropertyKey), Value: r.String(MaxPropertyVal)}
		}
	}
	if body := r.Bytes(MaxBodyLen); len(body) > 0 {
		if shareBody {
			m.Body = body
		} else {
			m.Body = append([]byte(nil), body...)
		}
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := m.checkFields(); err != nil {
		return nil, err
	}
	return m, nil
}

// EncodedSize returns len(m.AppendEncoded(nil)) without encoding.
func (m *Message) EncodedSize() int {
	n := 1 + 3*8 + stringSize(len(m.ID)) + stringSize(len(m.Subject)) + uvarintSize(uint64(len(m.Tags)))
	if m.DeliverAt != 0 {
		n += 8 // version 2's delivery time
	}
	for _, t := range m.Tags {
		n += stringSize(len(t))
	}
	n += uvarintSize(uint64(len(m.Properties)))
	for _, p := range m.Properties {
		n += stringSize(len(p.Key)) + stringSize(len(p.Value))
	}
	return n + stringSize(len(m.Body))
}

func uvarintSize(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

func stringSize(n int) int { return uvarintSize(uint64(n)) + n }

// TagMask returns a 64-bit Bloom filter of tags: each tag sets one bit. A
// consumer filtering by tag skips an entry whose mask lacks its tag's bit
// without reading the message.
func TagMask(tags []string) uint64 {
	var mask uint64
	for _, t := range tags {
		h := fnv.New64a()
		h.Write([]byte(t))
		mask |= 1 << (h.Sum64() % 64)
	}
	return mask
}

// AppendStamped appends to dst the encoding of the message whose encoding
// is wire (from ReadWire, so it decoded and passed Check) with its index
// and appended-at time replaced by index and appendedAt and its delivery
// time dropped (version 2 becomes version 1): what AppendEncoded writes for
// that message with Index and AppendedAt set and DeliverAt cleared, without
// decoding or encoding it. The message log stores a message this way when
// it is delivered.
func AppendStamped(dst, wire []byte, index uint64, appendedAt int64) ([]byte, error) {
	rest := wireDeliverAt
	switch {
	case len(wire) > 0 && wire[0] == messageVersionDelayed:
		rest = wireFixedDelayed
	case len(wire) > 0 && wire[0] != messageVersion:
		return nil, fmt.Errorf("%w: unknown version %d", ErrInvalid, wire[0])
	}
	if len(wire) < rest {
		return nil, fmt.Errorf("%w: %d bytes, shorter than its fixed fields", ErrInvalid, len(wire))
	}
	b := append(dst, messageVersion)
	b = binenc.AppendUint64(b, index)
	b = append(b, wire[wireCreatedAt:wireAppendedAt]...)
	b = binenc.AppendUint64(b, uint64(appendedAt))
	return append(b, wire[rest:]...), nil
}
