package logs

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// sampleMessage returns a message using every field.
func sampleMessage(i int) *message.Message {
	return &message.Message{
		Index:      uint64(i + 1),
		ID:         fmt.Sprintf("id-%d", i),
		Subject:    "orders.created",
		CreatedAt:  1_700_000_000_000 + int64(i),
		AppendedAt: 1_700_000_000_500 + int64(i),
		Tags:       []string{"eu", "priority"},
		Properties: []message.Property{{Key: "trace", Value: "abc"}, {Key: "empty"}},
		Body:       []byte(fmt.Sprintf("body of message %d", i)),
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
	if _, _, err := ml.Append(&message.Message{Subject: "no id"}); !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("Append invalid = %v, want message.ErrInvalid", err)
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
	err := ml.Scan(addrs[3].off, func(off int64, size int, m *message.Message) error {
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
	if _, err := ml.ReadAt(off); !errors.Is(err, ErrCorrupt) || !errors.Is(err, message.ErrInvalid) {
		t.Fatalf("ReadAt = %v, want ErrCorrupt and message.ErrInvalid", err)
	}
	if _, err := ml.Read(off, RecordSize(13)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read = %v, want ErrCorrupt", err)
	}
	if err := ml.Scan(off, func(int64, int, *message.Message) error { return nil }); !errors.Is(err, ErrCorrupt) {
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
func TestAppendWireStoresWhatAppendStores(t *testing.T) {
	msgs := []*message.Message{
		{ID: "a", Subject: "b"},
		{ID: "a", Subject: "b", DeliverAt: 1_795_831_200_000, Body: []byte("due")},
		{ID: strings.Repeat("i", message.MaxIDLen), Subject: "s", Tags: []string{"x", "y"},
			Properties: []message.Property{{Key: "k", Value: "v"}}, Body: make([]byte, 300), CreatedAt: 42, Index: 7, AppendedAt: 9},
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
	// Each is refused whole (message.AppendStamped's test has the cases).
	full := (&message.Message{ID: "a", Subject: "b", DeliverAt: 5}).AppendEncoded(nil)
	for _, wire := range [][]byte{nil, full[:1], full[:20], full[:30], {9, 0, 0}} {
		if _, _, err := ml.AppendWire(wire, 1, 1); !errors.Is(err, message.ErrInvalid) {
			t.Errorf("AppendWire(%x) = %v, want message.ErrInvalid", wire, err)
		}
	}
	if ml.Log().Next() != 0 {
		t.Fatalf("refused wires wrote %d bytes", ml.Log().Next())
	}
}
