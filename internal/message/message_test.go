package message

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/binenc"
)

// sampleMessage returns a message using every field.
func sampleMessage(i int) *Message {
	return &Message{
		Index:      uint64(i + 1),
		ID:         fmt.Sprintf("id-%d", i),
		Subject:    "orders.created",
		CreatedAt:  1_700_000_000_000 + int64(i),
		AppendedAt: 1_700_000_000_500 + int64(i),
		Tags:       []string{"eu", "priority"},
		Properties: []Property{{"trace", "abc"}, {"empty", ""}},
		Body:       []byte(fmt.Sprintf("body of message %d", i)),
	}
}

func TestMessageRoundTrip(t *testing.T) {
	full := sampleMessage(7)
	limits := &Message{
		Index:      ^uint64(0),
		ID:         strings.Repeat("i", MaxIDLen),
		Subject:    strings.Repeat("s", MaxSubjectLen),
		CreatedAt:  -1,
		AppendedAt: 1 << 62,
		Tags:       make([]string, MaxTags),
		Properties: []Property{{strings.Repeat("k", MaxPropertyKey), strings.Repeat("v", MaxPropertyVal)}},
		Body:       bytes.Repeat([]byte{0xab}, 1<<16),
	}
	for i := range limits.Tags {
		limits.Tags[i] = strings.Repeat("t", MaxTagLen)
	}
	for _, tc := range []struct {
		name string
		m    *Message
	}{
		{"full", full},
		{"minimal", &Message{ID: "a", Subject: "b"}},
		{"empty body with tags", &Message{ID: "a", Subject: "b", Tags: []string{"x"}}},
		{"properties only", &Message{ID: "a", Subject: "b", Properties: []Property{{"k", "v"}}}},
		{"body only", &Message{ID: "a", Subject: "b", Body: []byte{0}}},
		{"limits", limits},
		{"delayed", &Message{ID: "a", Subject: "b", DeliverAt: 1_795_831_200_000, Body: []byte("later")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.m.Check(); err != nil {
				t.Fatal(err)
			}
			enc := tc.m.AppendEncoded([]byte("prefix"))[len("prefix"):]
			if len(enc) != tc.m.EncodedSize() {
				t.Fatalf("encoded %d bytes, EncodedSize %d", len(enc), tc.m.EncodedSize())
			}
			got, err := Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.m) {
				t.Fatalf("decoded %+v, want %+v", got, tc.m)
			}
			// The result does not alias its input.
			if len(got.Body) > 0 {
				enc[len(enc)-1] ^= 0xff
				if !bytes.Equal(got.Body, tc.m.Body) {
					t.Fatal("decoded body aliases the encoding")
				}
			}
		})
	}
}

func TestMessageCheck(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	for _, tc := range []struct {
		name string
		edit func(*Message)
		ok   bool
	}{
		{"valid", func(*Message) {}, true},
		{"no id", func(m *Message) { m.ID = "" }, false},
		{"id at limit", func(m *Message) { m.ID = long(MaxIDLen) }, true},
		{"id too long", func(m *Message) { m.ID = long(MaxIDLen + 1) }, false},
		{"no subject", func(m *Message) { m.Subject = "" }, false},
		{"subject at limit", func(m *Message) { m.Subject = long(MaxSubjectLen) }, true},
		{"subject too long", func(m *Message) { m.Subject = long(MaxSubjectLen + 1) }, false},
		{"tags at limit", func(m *Message) { m.Tags = make([]string, MaxTags); fill(m.Tags) }, true},
		{"too many tags", func(m *Message) { m.Tags = make([]string, MaxTags+1); fill(m.Tags) }, false},
		{"empty tag", func(m *Message) { m.Tags = []string{""} }, false},
		{"tag at limit", func(m *Message) { m.Tags = []string{long(MaxTagLen)} }, true},
		{"tag too long", func(m *Message) { m.Tags = []string{long(MaxTagLen + 1)} }, false},
		{"properties at limit", func(m *Message) { m.Properties = make([]Property, MaxProperties); fillProps(m.Properties) }, true},
		{"too many properties", func(m *Message) { m.Properties = make([]Property, MaxProperties+1); fillProps(m.Properties) }, false},
		{"empty key", func(m *Message) { m.Properties = []Property{{"", "v"}} }, false},
		{"key too long", func(m *Message) { m.Properties = []Property{{long(MaxPropertyKey + 1), ""}} }, false},
		{"value at limit", func(m *Message) { m.Properties = []Property{{"k", long(MaxPropertyVal)}} }, true},
		{"value too long", func(m *Message) { m.Properties = []Property{{"k", long(MaxPropertyVal + 1)}} }, false},
		{"body at limit", func(m *Message) { m.Body = make([]byte, MaxBodyLen) }, true},
		{"body too long", func(m *Message) { m.Body = make([]byte, MaxBodyLen+1) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sampleMessage(0)
			tc.edit(m)
			err := m.Check()
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			// What Check accepts decodes; and the decoder enforces the limits.
			if _, err := Decode(m.AppendEncoded(nil)); err != nil {
				t.Fatalf("decode of a valid message: %v", err)
			}
		})
	}
}

func fill(tags []string) {
	for i := range tags {
		tags[i] = fmt.Sprint("t", i)
	}
}

func fillProps(ps []Property) {
	for i := range ps {
		ps[i] = Property{fmt.Sprint("k", i), "v"}
	}
}

func TestDecodeRejects(t *testing.T) {
	enc := sampleMessage(1).AppendEncoded(nil)
	withVersion := func(v byte) []byte { b := bytes.Clone(enc); b[0] = v; return b }
	// An encoding whose ID is empty: Check runs on decode too.
	noID := (&Message{Subject: "s"}).AppendEncoded(nil)
	for _, tc := range []struct {
		name string
		p    []byte
	}{
		{"empty", nil},
		{"trailing byte", append(bytes.Clone(enc), 0)},
		{"version 0", withVersion(0)},
		{"version 3", withVersion(3)},
		// Version 2 read as a delivery time the created-at of a version-1
		// encoding shifted by 8 bytes, so it fails further on; with a zero
		// delivery time it is refused outright (version 1 is its encoding).
		{"version 2 shape of version 1", withVersion(2)},
		{"version 2 without a delivery time", zeroDeliverAt()},
		{"invalid message", noID},
		{"overlong length", overlongSubject()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := Decode(tc.p); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode = %+v, %v; want ErrInvalid", m, err)
			}
		})
	}
	// Every proper prefix is refused.
	for n := range len(enc) {
		if _, err := Decode(enc[:n]); !errors.Is(err, ErrInvalid) {
			t.Fatalf("prefix of %d bytes: %v, want ErrInvalid", n, err)
		}
	}
}

// zeroDeliverAt returns a version-2 encoding whose delivery time is 0.
func zeroDeliverAt() []byte {
	enc := (&Message{ID: "a", Subject: "b", DeliverAt: 1}).AppendEncoded(nil)
	clear(enc[25:33]) // version, index, created-at, appended-at, then deliver-at
	return enc
}

// overlongSubject returns a message encoding whose subject length is a
// non-minimal uvarint (0x81 0x00 for 1): it decodes to a message whose
// encoding differs, so it is refused.
func overlongSubject() []byte {
	m := &Message{ID: "a", Subject: "b"}
	enc := m.AppendEncoded(nil)
	i := 1 + 24 + 2 // version, three integers, id
	return append(append(enc[:i:i], 0x81, 0x00), enc[i+1:]...)
}

func TestTagMask(t *testing.T) {
	if TagMask(nil) != 0 {
		t.Fatal("TagMask(nil) != 0")
	}
	a, b := TagMask([]string{"a"}), TagMask([]string{"b"})
	if bits.OnesCount64(a) != 1 || bits.OnesCount64(b) != 1 {
		t.Fatalf("one tag sets %d and %d bits, want 1", bits.OnesCount64(a), bits.OnesCount64(b))
	}
	if TagMask([]string{"a", "b"}) != a|b || TagMask([]string{"b", "a", "a"}) != a|b {
		t.Fatal("TagMask is not the union of its tags' bits")
	}
	if TagMask([]string{"a"}) != a {
		t.Fatal("TagMask is not deterministic")
	}
	// A mask with a tag's bit cleared rules that tag out.
	m := TagMask([]string{"x", "y", "z"})
	if x := TagMask([]string{"x"}); m&x != x {
		t.Fatal("mask lacks the bit of one of its tags")
	}
}

// checkWire holds ReadWire and the record AppendWire stores for p,
// one valid encoding, to what decoding and encoding again would give: the
// wire is p itself, and the record is the decoded message stamped and
// delivered at once, encoded.
func checkWire(t *testing.T, p []byte) {
	t.Helper()
	m, wire, err := ReadWire(binenc.NewReader(p))
	if err != nil {
		t.Fatalf("ReadWire: %v", err)
	}
	if !bytes.Equal(wire, p) {
		t.Fatalf("wire differs from the encoding read:\n in   %x\n wire %x", p, wire)
	}
	const index, appendedAt = 0x0102030405060708, 1_795_831_200_123
	got, err := AppendStamped([]byte("prefix"), wire, index, appendedAt)
	if err != nil {
		t.Fatalf("AppendStamped: %v", err)
	}
	m.Index, m.AppendedAt, m.DeliverAt = index, appendedAt, 0
	if want := m.AppendEncoded([]byte("prefix")); !bytes.Equal(got, want) {
		t.Fatalf("stamped record differs from the message encoded:\n got  %x\n want %x", got, want)
	}
}

func TestAppendStampedRefusesWhatIsNoMessage(t *testing.T) {
	full := (&Message{ID: "a", Subject: "b", DeliverAt: 5}).AppendEncoded(nil)
	for _, wire := range [][]byte{nil, {messageVersion}, full[:wireDeliverAt-1], full[:wireFixedDelayed-1], {9, 0, 0}} {
		if got, err := AppendStamped(nil, wire, 1, 1); !errors.Is(err, ErrInvalid) || len(got) != 0 {
			t.Errorf("AppendStamped(%x) = %x, %v, want nothing and ErrInvalid", wire, got, err)
		}
	}
}
