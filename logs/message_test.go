package logs

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
			got, err := DecodeMessage(enc)
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
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidMessage)) {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			// What Check accepts decodes; and the decoder enforces the limits.
			if _, err := DecodeMessage(m.AppendEncoded(nil)); err != nil {
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

func TestDecodeMessageRejects(t *testing.T) {
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
			if m, err := DecodeMessage(tc.p); !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("DecodeMessage = %+v, %v; want ErrInvalidMessage", m, err)
			}
		})
	}
	// Every proper prefix is refused.
	for n := range len(enc) {
		if _, err := DecodeMessage(enc[:n]); !errors.Is(err, ErrInvalidMessage) {
			t.Fatalf("prefix of %d bytes: %v, want ErrInvalidMessage", n, err)
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

func openMessageLog(t testing.TB, dir string, opts Options) *MessageLog {
	t.Helper()
	ml, err := OpenMessageLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Log().Close() })
	return ml
}

func TestMessageLog(t *testing.T) {
	ml := openMessageLog(t, t.TempDir(), Options{SegmentSize: 256})
	type addr struct {
		off  int64
		size int
	}
	var addrs []addr
	for i := range 10 {
		off, size, err := ml.Append(sampleMessage(i))
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, addr{off, size})
	}
	if _, _, err := ml.Append(&Message{Subject: "no id"}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("Append invalid = %v, want ErrInvalidMessage", err)
	}
	if err := ml.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	last := addrs[len(addrs)-1]
	if ml.Log().End() != last.off+int64(last.size) {
		t.Fatalf("End %d, want %d: the invalid message was written?", ml.Log().End(), last.off+int64(last.size))
	}
	if len(ml.Log().Segments()) < 3 {
		t.Fatalf("only %d segments", len(ml.Log().Segments()))
	}
	for i, a := range addrs {
		want := sampleMessage(i)
		if m, err := ml.Read(a.off, a.size); err != nil || !reflect.DeepEqual(m, want) {
			t.Fatalf("Read(%d, %d) = %+v, %v", a.off, a.size, m, err)
		}
		if m, err := ml.ReadAt(a.off); err != nil || !reflect.DeepEqual(m, want) {
			t.Fatalf("ReadAt(%d) = %+v, %v", a.off, m, err)
		}
	}
	if _, err := ml.Read(addrs[0].off, addrs[0].size+1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read with wrong size = %v, want ErrCorrupt", err)
	}
	i := 3
	err := ml.Scan(addrs[3].off, func(off int64, size int, m *Message) error {
		if off != addrs[i].off || size != addrs[i].size || !reflect.DeepEqual(m, sampleMessage(i)) {
			t.Fatalf("Scan message %d: (%d, %d, %+v)", i, off, size, m)
		}
		i++
		return nil
	})
	if err != nil || i != len(addrs) {
		t.Fatalf("Scan = %v after %d messages", err, i)
	}
}

// TestMessageLogUndecodable checks that a record that passes its checksum
// but does not decode is reported as corrupt.
func TestMessageLogUndecodable(t *testing.T) {
	ml := openMessageLog(t, t.TempDir(), Options{})
	off, err := ml.Log().Append([]byte("not a message"))
	if err != nil {
		t.Fatal(err)
	}
	ml.Log().Flush()
	if _, err := ml.ReadAt(off); !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("ReadAt = %v, want ErrCorrupt and ErrInvalidMessage", err)
	}
	if _, err := ml.Read(off, RecordSize(13)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read = %v, want ErrCorrupt", err)
	}
	if err := ml.Scan(off, func(int64, int, *Message) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Scan = %v, want ErrCorrupt", err)
	}
}

func TestRetainFrom(t *testing.T) {
	const n = 40
	ml := openMessageLog(t, t.TempDir(), Options{SegmentSize: 512})
	for i := range n {
		m := sampleMessage(i)
		m.AppendedAt = int64(i) * 1000 // leader-stamped, non-decreasing
		if _, _, err := ml.Append(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := ml.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	segs := ml.Log().Segments()
	if len(segs) < 4 {
		t.Fatalf("only %d segments", len(segs))
	}
	// first[i] is the appended-at of segment i's first message.
	first := make([]int64, len(segs))
	for i, s := range segs {
		m, err := ml.ReadAt(s.Base)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = m.AppendedAt
	}
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	for _, tc := range []struct {
		name string
		r    Retention
		now  int64
		keep int // index of the first segment kept
	}{
		{"no rule", Retention{}, 1 << 40, 0},
		{"bytes: all fit", Retention{MaxBytes: total}, 0, 0},
		{"bytes: one too many", Retention{MaxBytes: total - 1}, 0, 1},
		{"bytes: two segments", Retention{MaxBytes: segs[len(segs)-2].Size + segs[len(segs)-1].Size}, 0, len(segs) - 2},
		{"bytes: tiny", Retention{MaxBytes: 1}, 0, len(segs) - 1},
		{"age: nothing old", Retention{MaxAge: 1000}, 0, 0},
		{"age: first segment", Retention{MaxAge: 1000}, first[1] + 1000 + 1, 1},
		{"age: not quite", Retention{MaxAge: 1000}, first[1] + 1000, 0},
		{"age: up to segment 3", Retention{MaxAge: 1000}, first[3] + 1001, 3},
		{"age: everything", Retention{MaxAge: 1}, 1 << 40, len(segs) - 1},
		{"both: age wins", Retention{MaxAge: 1000, MaxBytes: total}, first[2] + 1001, 2},
		{"both: bytes win", Retention{MaxAge: 1 << 40, MaxBytes: 1}, first[2] + 1001, len(segs) - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, err := ml.RetainFrom(tc.r, tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if want := segs[tc.keep].Base; from != want {
				t.Fatalf("RetainFrom = %d, want %d (segment %d)", from, want, tc.keep)
			}
		})
	}

	// Removing what RetainFrom allows.
	from, err := ml.RetainFrom(Retention{MaxAge: 1000}, first[2]+1001)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ml.Log().RemoveBefore(from); err != nil || n != 2 {
		t.Fatalf("RemoveBefore = %d, %v; want 2", n, err)
	}
	if _, err := ml.ReadAt(segs[1].Base); !errors.Is(err, ErrRetained) {
		t.Fatalf("ReadAt removed = %v, want ErrRetained", err)
	}
	if m, err := ml.ReadAt(segs[2].Base); err != nil || m.AppendedAt != first[2] {
		t.Fatalf("ReadAt kept = %+v, %v", m, err)
	}
}

// checkWire holds ReadMessageWire and the record AppendWire stores for p,
// one valid encoding, to what decoding and encoding again would give: the
// wire is p itself, and the record is the decoded message stamped and
// delivered at once, encoded.
func checkWire(t *testing.T, p []byte) {
	t.Helper()
	m, wire, err := ReadMessageWire(binenc.NewReader(p))
	if err != nil {
		t.Fatalf("ReadMessageWire: %v", err)
	}
	if !bytes.Equal(wire, p) {
		t.Fatalf("wire differs from the encoding read:\n in   %x\n wire %x", p, wire)
	}
	const index, appendedAt = 0x0102030405060708, 1_795_831_200_123
	got, err := stampedRecord([]byte("prefix"), wire, index, appendedAt)
	if err != nil {
		t.Fatalf("stampedRecord: %v", err)
	}
	m.Index, m.AppendedAt, m.DeliverAt = index, appendedAt, 0
	if want := m.AppendEncoded([]byte("prefix")); !bytes.Equal(got, want) {
		t.Fatalf("stamped record differs from the message encoded:\n got  %x\n want %x", got, want)
	}
}

func TestAppendWireStoresWhatAppendStores(t *testing.T) {
	msgs := []*Message{
		{ID: "a", Subject: "b"},
		{ID: "a", Subject: "b", DeliverAt: 1_795_831_200_000, Body: []byte("due")},
		{ID: strings.Repeat("i", MaxIDLen), Subject: "s", Tags: []string{"x", "y"},
			Properties: []Property{{Key: "k", Value: "v"}}, Body: make([]byte, 300), CreatedAt: 42, Index: 7, AppendedAt: 9},
	}
	for i := range 3 {
		msgs = append(msgs, sampleMessage(i))
	}
	ml, err := OpenMessageLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Log().Close()
	for i, m := range msgs {
		checkWire(t, m.AppendEncoded(nil))
		off, size, err := ml.AppendWire(m.AppendEncoded(nil), uint64(100+i), int64(1000+i))
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := ml.Log().Flush(); err != nil {
			t.Fatal(err)
		}
		got, err := ml.Read(off, size)
		if err != nil {
			t.Fatalf("message %d: read back: %v", i, err)
		}
		want := *m
		want.Index, want.AppendedAt, want.DeliverAt = uint64(100+i), int64(1000+i), 0
		if !bytes.Equal(got.AppendEncoded(nil), want.AppendEncoded(nil)) {
			t.Fatalf("message %d: stored %+v, want %+v", i, got, want)
		}
	}
}

func TestAppendWireRefusesWhatIsNoMessage(t *testing.T) {
	ml, err := OpenMessageLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ml.Log().Close()
	full := (&Message{ID: "a", Subject: "b", DeliverAt: 5}).AppendEncoded(nil)
	for _, wire := range [][]byte{nil, {messageVersion}, full[:wireDeliverAt-1], full[:wireFixedDelayed-1], {9, 0, 0}} {
		if _, _, err := ml.AppendWire(wire, 1, 1); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("AppendWire(%x) = %v, want ErrInvalidMessage", wire, err)
		}
	}
	if ml.Log().Next() != 0 {
		t.Fatalf("refused wires wrote %d bytes", ml.Log().Next())
	}
}
