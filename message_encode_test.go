package qmq

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/test/testmsg"
)

func sampleToEncode() *Message {
	m := &Message{id: "order-42", subject: "orders.created", createdAt: time.UnixMilli(1_795_000_000_123)}
	m.SetInt("order", 42)
	m.AddTag("vip")
	m.SetBody([]byte("hello"))
	return m
}

func TestMarshalRoundTrip(t *testing.T) {
	for _, delayed := range []bool{false, true} {
		m := sampleToEncode()
		if delayed {
			m.SetDeliverAt(time.UnixMilli(1_795_000_090_000))
		}
		p, err := m.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Message
		if err := got.UnmarshalBinary(p); err != nil {
			t.Fatal(err)
		}
		if got.ID() != m.ID() || got.Subject() != m.Subject() || !got.CreatedAt().Equal(m.CreatedAt()) ||
			!got.DeliverAt().Equal(m.DeliverAt()) || !reflect.DeepEqual(got.Tags(), m.Tags()) ||
			!reflect.DeepEqual(got.Properties(), m.Properties()) || !bytes.Equal(got.Body(), m.Body()) {
			t.Errorf("delayed %v: decoded %+v, want %+v", delayed, &got, m)
		}
		if !got.chosenID {
			t.Errorf("delayed %v: a decoded message's id does not count as chosen: its resends would not route by id", delayed)
		}
	}
}

// A message is encoded up to MaxMessageSize and refused just over it.
func TestMarshalAtTheLimit(t *testing.T) {
	for _, size := range []int{limits.MaxMessage - 1, limits.MaxMessage, limits.MaxMessage + 1} {
		w := testmsg.OfSize("big", "orders", 0, size)
		m := &Message{id: w.ID, subject: w.Subject, createdAt: time.UnixMilli(w.CreatedAt), props: w.Properties, body: w.Body}
		p, err := m.MarshalBinary()
		if size > limits.MaxMessage {
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Errorf("size %d: err %v, want ErrMessageTooLarge", size, err)
			}
			continue
		}
		if err != nil || len(p) != size {
			t.Fatalf("size %d: %d bytes, %v", size, len(p), err)
		}
		var got Message
		if err := got.UnmarshalBinary(p); err != nil {
			t.Errorf("size %d: decode: %v", size, err)
		}
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	good, err := sampleToEncode().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	stored := (&message.Message{Index: 7, ID: "a", Subject: "b", AppendedAt: 5}).AppendEncoded(nil)
	spaced := (&message.Message{ID: "a b", Subject: "b"}).AppendEncoded(nil)
	for name, tc := range map[string]struct {
		p    []byte
		want error
	}{
		"truncated":      {good[:len(good)-1], message.ErrInvalid},
		"trailing bytes": {append(append([]byte(nil), good...), 0), message.ErrInvalid},
		"empty":          {nil, message.ErrInvalid},
		"stored message": {stored, message.ErrInvalid},
		"id with space":  {spaced, ErrInvalidID},
	} {
		m := sampleToEncode()
		if err := m.UnmarshalBinary(tc.p); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", name, err, tc.want)
		}
		if m.ID() != "order-42" || string(m.Body()) != "hello" {
			t.Errorf("%s: a refused decode changed the message", name)
		}
	}
}

func FuzzUnmarshalBinary(f *testing.F) {
	good, _ := sampleToEncode().MarshalBinary()
	f.Add(good)
	delayed := sampleToEncode()
	delayed.SetDeliverAt(time.UnixMilli(1_795_000_090_000))
	p, _ := delayed.MarshalBinary()
	f.Add(p)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add((&message.Message{Index: 7, ID: "a", Subject: "b"}).AppendEncoded(nil))
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, p []byte) {
		var m Message
		if err := m.UnmarshalBinary(p); err != nil {
			if !errors.Is(err, message.ErrInvalid) && !errors.Is(err, ErrInvalidID) {
				t.Fatalf("error %v is neither message.ErrInvalid nor ErrInvalidID", err)
			}
			return
		}
		again, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		if !bytes.Equal(again, p) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", p, again)
		}
	})
}
