package qmq

import (
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// Limits of a message and of the names it travels under. They are the
// brokers' own: a broker refuses what is over them too. The SDK refuses
// a message over one before sending it (Producer.Check says which) with
// an error wrapping ErrInvalidMessage, ErrMessageTooLarge for a size.
const (
	// MaxMessageSize is the largest message, in encoded bytes: its id,
	// subject, tags, properties and body with their length prefixes, and
	// about 30 bytes more (16 MiB less 4 KiB in all, so that a message
	// fits every frame and record it travels in). Each field has its own
	// limit too.
	MaxMessageSize = 16<<20 - 4<<10

	// MaxBodyLen bounds a message's body, in bytes (8 MiB).
	MaxBodyLen = 8 << 20

	// MaxProperties bounds a message's properties; MaxPropertyKeyLen and
	// MaxPropertyValueLen a property's key (1 byte at least) and its
	// value, in bytes.
	MaxProperties       = 256
	MaxPropertyKeyLen   = 256
	MaxPropertyValueLen = 64 << 10

	// MaxTags bounds a message's tags (Message.AddTag), and a consumer's
	// (WithTags, WithAllTags); MaxTagLen a tag, in bytes (1 at least).
	MaxTags   = 10
	MaxTagLen = 128

	// MaxIDLen bounds a message's id, in bytes (Message.SetID).
	MaxIDLen = 128

	// MaxNameLen bounds a subject's, a consumer group's and a consumer's
	// name, in bytes (ErrInvalidName says the rest of the rule).
	MaxNameLen = 200
)

// The SDK's limits are the brokers': the build fails if one differs (each
// index must be 0, in an array of one).
var (
	_ = [1]struct{}{}[MaxMessageSize-limits.MaxMessage]
	_ = [1]struct{}{}[MaxBodyLen-message.MaxBodyLen]
	_ = [1]struct{}{}[MaxProperties-message.MaxProperties]
	_ = [1]struct{}{}[MaxPropertyKeyLen-message.MaxPropertyKey]
	_ = [1]struct{}{}[MaxPropertyValueLen-message.MaxPropertyVal]
	_ = [1]struct{}{}[MaxTags-message.MaxTags]
	_ = [1]struct{}{}[MaxTagLen-message.MaxTagLen]
	_ = [1]struct{}{}[MaxIDLen-message.MaxIDLen]
	_ = [1]struct{}{}[MaxNameLen-limits.MaxName]
	_ = [1]struct{}{}[DefaultMaxDelay-limits.DefaultMaxDelay]
)
