package fsm

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// sampleCommands returns one command of every type, some at their limits.
func sampleCommands() map[string]encoder {
	full := unitMsg("id-1", "orders", 64)
	full.Index, full.CreatedAt, full.AppendedAt = 7, -5, 1<<40
	full.Tags = []string{"eu", "vip"}
	full.Properties = []message.Property{{Key: "k", Value: "v"}, {Key: "empty", Value: ""}}
	many := make([]message.AckRange, limits.MaxAckRanges)
	for i := range many {
		many[i] = message.AckRange{First: int64(2 * i), Last: int64(2*i + 1)}
	}
	long := strings.Repeat("n", limits.MaxName)
	return map[string]encoder{
		"append":       &Append{Now: 1_700_000_000_000, Messages: []*message.Message{full, unitMsg("id-2", "x", 0)}},
		"append empty": &Append{Now: -1},
		"append apps": &Append{Now: 2, Messages: []*message.Message{full, unitMsg("id-3", "x", 0), unitMsg("id-4", "x", 1)},
			Apps: []Sender{{App: "billing", MaxDelayed: 1 << 30}, {App: long, MaxDelayed: 0}}, Senders: []int{2, 0, 1}},
		"pull":               &Pull{Start: StartEarliest, Now: 5, Subject: "orders", ConsumerGroup: "billing", Consumer: "c-1", Max: 100},
		"pull max":           &Pull{Start: StartEarliest, Now: math.MaxInt64, Subject: long, ConsumerGroup: long, Consumer: long, Max: math.MaxInt64},
		"ack":                &Ack{Now: 9, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 3}, {First: 7, Last: 7}}},
		"ack no ranges":      &Ack{Now: 9, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{}},
		"ack max ranges":     &Ack{Now: 9, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: many},
		"reclaim":            &Reclaim{Now: math.MinInt64, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3},
		"pull resend":        &Pull{Start: StartEarliest, Now: 5, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Resend: true, From: 0, Epoch: math.MaxUint64},
		"ack epoch":          &Ack{Now: 9, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1 << 40, Ranges: []message.AckRange{{First: 1, Last: 1}}},
		"forget":             &Forget{Now: 2, Subject: long, ConsumerGroup: "g"},
		"member":             &SetMember{Now: 3, ID: "node1", ClientAddr: "127.0.0.1:7000"},
		"member removal":     &SetMember{Now: 3, ID: "node1"},
		"fire":               &Fire{Now: 4, Refs: []uint64{0, 1 << 44, math.MaxUint64}},
		"fire none":          &Fire{Now: 4, Refs: []uint64{}},
		"broker-config seed": &SetBrokerConfig{Now: 0, Set: SetAllConfig, Seed: true, Config: DefaultBrokerConfig()},
		"broker-config change": &SetBrokerConfig{Now: 6, Set: SetDedupWindow | SetMaxPull,
			Config: BrokerConfig{DedupWindow: math.MaxInt64, MaxPull: 3, RetentionAge: 1}},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	for name, cmd := range sampleCommands() {
		t.Run(name, func(t *testing.T) {
			enc := cmd.Encode()
			got, err := Decode(enc)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if a, ok := got.(*Append); ok {
				checkAppendWire(t, a)
				withoutWire := *a
				withoutWire.Wire = nil
				if !reflect.DeepEqual(&withoutWire, cmd) {
					t.Fatalf("decoded %#v, want %#v", &withoutWire, cmd)
				}
			} else if !reflect.DeepEqual(got, cmd) {
				t.Fatalf("decoded %#v, want %#v", got, cmd)
			}
			// An Append is encoded again from the wire forms Decode kept.
			if again := got.(encoder).Encode(); !bytes.Equal(again, enc) {
				t.Fatalf("re-encoded %x, want %x", again, enc)
			}
			if CommandType(enc[0]).String() != strings.Fields(name)[0] {
				t.Fatalf("type byte %d is %q", enc[0], CommandType(enc[0]))
			}
		})
	}
}

func TestCommandTypeValues(t *testing.T) {
	// The values are written into the Raft log.
	for want, ct := range map[CommandType]CommandType{1: CmdAppend, 2: CmdPull, 3: CmdAck, 4: CmdReclaim, 5: CmdMember, 6: CmdFire, 7: CmdForget,
		8: CmdNack, 9: CmdExtend, 10: CmdExpire, 11: CmdSetConsumerGroup, 12: CmdResetConsumerGroup, 13: CmdDeadLetters, 14: CmdBrokerConfig} {
		if ct != want {
			t.Fatalf("%s = %d, want %d", ct, ct, want)
		}
	}
	if s := CommandType(99).String(); s != "command(99)" {
		t.Fatalf("unknown type prints %q", s)
	}
}

func TestDecodeRejects(t *testing.T) {
	pull := (&Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}).Encode()
	app := (&Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 3)}}).Encode()
	header := func(t CommandType) []byte {
		if t == CmdAppend {
			return appendHeaderVersion(nil, t, commandVersionAppendApps, 1)
		}
		return appendHeader(nil, t, 1)
	}
	// Version 3 of an Append: an application at an address.
	addrApp := func(addr string) []byte {
		b := binenc.AppendUvarint(appendHeaderVersion(nil, CmdAppend, commandVersionAppendAddr, 1), 1)
		return binenc.AppendUvarint(binenc.AppendString(binenc.AppendUvarint(binenc.AppendString(b, "a"), 0), addr), 0)
	}
	nonMinimal := func(b []byte, v byte) []byte { return append(b, v|0x80, 0x00) } // v as a 2-byte uvarint
	tooMany := binenc.AppendUvarint(header(CmdAppend), limits.MaxBatchMessages+1)
	longName := binenc.AppendUvarint(appendNames(header(CmdReclaim), strings.Repeat("s", limits.MaxName+1), "g", "c"), 0)
	// Subject "s" with a 2-byte length prefix, then group and consumer.
	nonMinimalName := binenc.AppendUvarint(binenc.AppendString(binenc.AppendString(append(nonMinimal(header(CmdReclaim), 1), 's'), "g"), "c"), 0)
	ranges := binenc.AppendUvarint(appendNames(header(CmdAck), "s", "g", "c"), 0) // epoch 0
	tooManyRanges := binenc.AppendUvarint(append([]byte(nil), ranges...), limits.MaxAckRanges+1)
	config := (&SetBrokerConfig{Now: 1, Set: SetAllConfig, Config: DefaultBrokerConfig()}).Encode()
	configFlag := bytes.Clone(config)
	configFlag[11] = 2                                                                                // a flag not known
	configHuge := binenc.AppendUvarint(append(header(CmdBrokerConfig), byte(SetAllConfig), 0), 1<<63) // past an int64
	for range 6 {
		configHuge = binenc.AppendUvarint(configHuge, 1)
	}
	badMessage := append(header(CmdAppend), 1)
	badMessage = (&message.Message{ID: "", Subject: "s"}).AppendEncoded(badMessage) // empty id
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"type only", []byte{byte(CmdPull)}},
		{"no time", []byte{byte(CmdPull), commandVersion, 1, 2}},
		{"unknown type", header(99)},
		{"type zero", header(0)},
		{"future version", append([]byte{byte(CmdPull), commandVersionPull4 + 1}, pull[2:]...)},
		{"epoch version of append", append([]byte{byte(CmdAppend), commandVersionEpoch}, app[2:]...)},
		{"truncated pull", pull[:len(pull)-1]},
		{"trailing byte", append(append([]byte(nil), pull...), 0)},
		{"truncated append", app[:len(app)-1]},
		{"too many messages", tooMany},
		{"name too long", longName},
		{"too many ranges", tooManyRanges},
		{"invalid message", badMessage},
		{"non-minimal count", nonMinimal(header(CmdAppend), 0)},
		{"append version 3 naming no address", addrApp("")},
		{"append's address too long", addrApp(strings.Repeat("a", limits.MaxAddr+1))},
		{"append's max delayed over its bound", binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendString(binenc.AppendUvarint(header(CmdAppend), 1), "a"), limits.MaxDelayed+1), 0)},
		{"non-minimal max", append(nonMinimal(appendNames(header(CmdPull), "s", "g", "c"), 1), 0, 0)},
		{"non-minimal epoch", nonMinimal(binenc.AppendUvarint(binenc.AppendUvarint(appendNames(header(CmdPull), "s", "g", "c"), 1), 0), 3)},
		{"non-minimal name length", nonMinimalName},
		{"non-minimal range", nonMinimal(binenc.AppendUvarint(binenc.AppendUvarint(ranges, 1), 0), 0)},
		{"truncated broker config", config[:len(config)-1]},
		{"broker config with a trailing byte", append(bytes.Clone(config), 0)},
		{"broker config with an unknown flag", configFlag},
		{"broker config past an int64", configHuge},
		{"broker config of version 2", append([]byte{byte(CmdBrokerConfig), 2}, config[2:]...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := Decode(tc.b)
			if !errors.Is(err, ErrBadCommand) || cmd != nil {
				t.Fatalf("Decode(%x) = %#v, %v; want ErrBadCommand", tc.b, cmd, err)
			}
		})
	}
	// The non-minimal samples above are well-formed apart from the varint.
	for _, b := range [][]byte{
		binenc.AppendUvarint(binenc.AppendUvarint(header(CmdAppend), 0), 0), // no application, no message
		addrApp(strings.Repeat("a", limits.MaxAddr)),
		append(binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendUvarint(appendNames(header(CmdPull), "s", "g", "c"), 1), 0), 0),
			0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), // flags, tags, start, start-at, idle expiry, max bytes, app, max consumers
		binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendUvarint(ranges, 1), 0), 0),
		binenc.AppendUvarint(appendNames(header(CmdReclaim), "s", "g", "c"), 0),
	} {
		if _, err := Decode(b); err != nil {
			t.Fatalf("Decode(%x): %v", b, err)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"0", true},
		{"orders.created", true},
		{"a-b_c:d.e", true},
		{"Z9", true},
		{strings.Repeat("x", limits.MaxName), true},
		{"", false},
		{strings.Repeat("x", limits.MaxName+1), false},
		{".", false},
		{"..", false},
		{".a", false},
		{"-a", false},
		{"_a", false},
		{":a", false},
		{"a/b", false},
		{`a\b`, false},
		{"a b", false},
		{"a\x00", false},
		{"é", false},
	} {
		err := CheckName("subject", tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// checkAppendWire checks that a decoded Append kept each message's
// encoding: what encoding the decoded message gives.
func checkAppendWire(t *testing.T, a *Append) {
	t.Helper()
	if len(a.Wire) != len(a.Messages) {
		t.Fatalf("decoded %d messages with %d wire forms", len(a.Messages), len(a.Wire))
	}
	for i, m := range a.Messages {
		if want := m.AppendEncoded(nil); !bytes.Equal(a.Wire[i], want) {
			t.Fatalf("message %d: wire %x, want %x", i, a.Wire[i], want)
		}
	}
}
