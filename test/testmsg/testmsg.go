// Package testmsg builds messages of an exact encoded size for the tests
// that probe the limits of package limits at, just under and just over
// each one.
package testmsg

import (
	"fmt"
	"strings"

	"github.com/qmqgo/qmq/internal/message"
)

// OfSize returns a message of subject whose encoding (message.Message's) is
// exactly size bytes: a body of up to message.MaxBodyLen and as many
// properties of up to message.MaxPropertyVal as the rest needs. It panics if
// no message of that size can be built (below the size of an empty one).
// deliverAt (0 for none) is set before sizing, since it changes the
// encoding.
func OfSize(id, subject string, deliverAt int64, size int) *message.Message {
	m := &message.Message{ID: id, Subject: subject, CreatedAt: 1, DeliverAt: deliverAt}
	if m.EncodedSize() > size {
		panic(fmt.Sprintf("testmsg: no message of %s is as small as %d bytes", subject, size))
	}
	m.Body = make([]byte, min(size-m.EncodedSize(), message.MaxBodyLen))
	for i := range m.Body {
		m.Body[i] = byte(i)
	}
	for m.EncodedSize() > size { // the body's length prefix grew
		m.Body = m.Body[:len(m.Body)-1]
	}
	for i := 0; m.EncodedSize() < size; i++ {
		key := fmt.Sprintf("p%03d", i)
		room := size - m.EncodedSize() - 1 - len(key) - 1 // the key, one-byte prefixes
		v := min(max(room, 0), message.MaxPropertyVal)
		p := message.Property{Key: key, Value: strings.Repeat("v", v)}
		m.Properties = append(m.Properties, p)
		// Longer prefixes may overshoot: trim the value until it fits.
		for m.EncodedSize() > size && len(m.Properties[i].Value) > 0 {
			m.Properties[i].Value = m.Properties[i].Value[:len(m.Properties[i].Value)-1]
		}
		if m.EncodedSize() > size {
			panic(fmt.Sprintf("testmsg: cannot build a message of exactly %d bytes", size))
		}
	}
	return m
}
