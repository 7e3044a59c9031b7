package qmq

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
)

func TestTypedProperties(t *testing.T) {
	m := &Message{}
	when := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	m.SetString("s", "v")
	m.SetInt("i", -42)
	m.SetBool("b", true)
	m.SetTime("t", when)
	m.SetString("s", "replaced")

	if got := m.String("s"); got != "replaced" {
		t.Errorf("String = %q", got)
	}
	if got, err := m.Int("i"); err != nil || got != -42 {
		t.Errorf("Int = %d, %v", got, err)
	}
	if got, err := m.Bool("b"); err != nil || !got {
		t.Errorf("Bool = %v, %v", got, err)
	}
	if got, err := m.Time("t"); err != nil || !got.Equal(when) {
		t.Errorf("Time = %v, %v", got, err)
	}
	if _, err := m.Int("s"); err == nil {
		t.Error("Int of a non-integer property succeeded")
	}
	if _, err := m.Bool("missing"); err == nil {
		t.Error("Bool of a missing property succeeded")
	}
	want := map[string]string{"s": "replaced", "i": "-42", "b": "true", "t": when.Format(time.RFC3339Nano)}
	if got := m.Properties(); !reflect.DeepEqual(got, want) {
		t.Errorf("Properties = %v, want %v", got, want)
	}
	if len(m.props) != 4 {
		t.Errorf("setting a property twice stored it twice: %v", m.props)
	}
}

func TestKeyIsTheKeyProperty(t *testing.T) {
	m := &Message{}
	if m.Key() != "" {
		t.Fatalf("Key of a message without one = %q", m.Key())
	}
	m.SetKey("order-1")
	m.SetKey("order-2")
	if got := m.Key(); got != "order-2" {
		t.Fatalf("Key = %q, want order-2", got)
	}
	// It is the property queries select by, stored once, and it travels.
	if got := m.Properties(); len(got) != 1 || got[message.KeyProperty] != "order-2" {
		t.Fatalf("Properties = %v, want only %s=order-2", got, message.KeyProperty)
	}
	back := fromLog(m.toLog(time.UnixMilli(1700000000000)), 0, 1, "g1")
	if got := back.Key(); got != "order-2" {
		t.Fatalf("Key after the wire = %q", got)
	}
}

func TestMessageSurvivesTheWire(t *testing.T) {
	m := &Message{id: "id", subject: "s", createdAt: time.UnixMilli(1700000000123), body: []byte("b")}
	m.SetInt("n", 7)
	m.AddTag("red")
	now := time.UnixMilli(1700000000500)
	m.SetDeliverAt(now.Add(time.Hour))
	l := m.toLog(now)
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
	back := fromLog(l, 9, 3, "g1")
	if back.ID() != "id" || back.Subject() != "s" || !back.CreatedAt().Equal(m.CreatedAt()) ||
		string(back.Body()) != "b" || back.String("n") != "7" || back.Tags()[0] != "red" || back.pullSeq != 9 || back.epoch != 3 ||
		!back.DeliverAt().Equal(now.Add(time.Hour)) {
		t.Fatalf("round trip changed the message: %+v", back)
	}
	// A delivery time already past is sent as none: delivered at once.
	m.SetDeliverAt(now.Add(-time.Hour))
	if l := m.toLog(now); l.DeliverAt != 0 {
		t.Fatalf("a past delivery time went out as %d", l.DeliverAt)
	}
}

func TestMessageIDsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	now := time.Now()
	for range 10000 {
		id := newMessageID(now)
		if seen[id] {
			t.Fatalf("id %s generated twice", id)
		}
		seen[id] = true
	}
}

func TestToRanges(t *testing.T) {
	got := toRanges([]int64{5, 1, 2, 3, 9, 2, 10, 7})
	want := []struct{ f, l int64 }{{1, 3}, {5, 5}, {7, 7}, {9, 10}}
	if len(got) != len(want) {
		t.Fatalf("toRanges = %v", got)
	}
	for i, w := range want {
		if got[i].First != w.f || got[i].Last != w.l {
			t.Fatalf("toRanges = %v, want %v", got, want)
		}
	}
}

func TestProducerRefusesInvalidMessages(t *testing.T) {
	p, err := NewProducer("127.0.0.1:1") // never dialled: the message is refused first
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bad := p.GenerateMessage("no spaces allowed")
	if err := p.SendMessage(t.Context(), bad); err == nil {
		t.Fatal("a message with an invalid subject was accepted")
	}
	huge := p.GenerateMessage("ok")
	for i := range 11 {
		huge.AddTag(string(rune('a' + i)))
	}
	if err := p.SendMessage(t.Context(), huge); err == nil {
		t.Fatal("a message with 11 tags was accepted")
	}
}

func TestSetIDRules(t *testing.T) {
	max := strings.Repeat("x", message.MaxIDLen)
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"order-42", true}, {"!", true}, {"~", true}, {max, true}, {max[1:], true},
		{max + "x", false}, {"", false}, {"a b", false}, {"tab\there", false}, {"del\x7f", false},
		{"nul\x00", false}, {"é", false}, {"\xff", false},
	} {
		m := &Message{id: "before"}
		err := m.SetID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidID)) {
			t.Errorf("SetID(%.20q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if want := map[bool]string{true: tc.id, false: "before"}[tc.ok]; m.ID() != want || m.chosenID != tc.ok {
			t.Errorf("after SetID(%.20q): id %.20q (chosen %v), want %.20q", tc.id, m.ID(), m.chosenID, want)
		}
	}
	// The ids the SDK makes keep the same rules.
	if id := newMessageID(time.Now()); checkID(id) != nil {
		t.Errorf("generated id %q breaks the id rules: %v", id, checkID(id))
	}
}
