package fsm

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// sampleConsumeCommands are the consumer commands and the pulls of every
// version with every field set, at and just under the decoder's limits.
func sampleConsumeCommands() map[string]encoder {
	long := strings.Repeat("n", limits.MaxName)
	ranges := func(n int) []message.AckRange {
		out := make([]message.AckRange, n)
		for i := range out {
			out[i] = message.AckRange{First: int64(2 * i), Last: int64(2*i + 1)}
		}
		return out
	}
	seqs := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i) << 20
		}
		return out
	}
	tags := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat(string(rune('a'+i)), size)
		}
		return out
	}
	all := ConsumerGroupSettings{MaxDeliveries: math.MaxUint32, RetryFirst: math.MaxInt64, RetryMax: -1, AckWait: 1, MaxInFlight: math.MaxUint32, IdleExpiry: 7}
	return map[string]encoder{
		"nack":                  &Nack{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, RetryAt: 1 << 42, Ranges: []message.AckRange{{First: 0, Last: 2}}},
		"nack max ranges":       &Nack{Now: 1, Subject: long, ConsumerGroup: long, Consumer: long, Epoch: math.MaxUint64, RetryAt: -1, Ranges: ranges(limits.MaxAckRanges)},
		"nack under max ranges": &Nack{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: ranges(limits.MaxAckRanges - 1)},
		"extend":                &Extend{Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1, Ranges: []message.AckRange{}},
		"extend max ranges":     &Extend{Now: 2, Subject: long, ConsumerGroup: "g", Consumer: "c", Ranges: ranges(limits.MaxAckRanges)},
		"expire":                &Expire{Now: math.MinInt64, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 9, Ranges: []message.AckRange{{First: 5, Last: 5}}},
		"expire max ranges":     &Expire{Now: 2, Subject: "s", ConsumerGroup: long, Consumer: "c", Ranges: ranges(limits.MaxAckRanges)},
		"set-group":             &SetConsumerGroup{Now: 3, Subject: "s", ConsumerGroup: "g", Set: SetAckWait, Settings: DefaultConsumerGroupSettings(), Start: StartAtTime, StartAt: 1 << 40},
		"set-group extremes":    &SetConsumerGroup{Now: 3, Subject: long, ConsumerGroup: long, Set: 0xff, Settings: all, Start: 0xff, StartAt: -1},
		"reset-group":           &ResetConsumerGroup{Now: 4, Subject: "s", ConsumerGroup: "g", To: StartEarliest},
		"reset-group extremes":  &ResetConsumerGroup{Now: 4, Subject: long, ConsumerGroup: long, To: 0xff, At: math.MinInt64},
		"dead-letters":          &DeadLetters{Now: 5, Subject: "s", ConsumerGroup: "g", Op: DeadResend, Seqs: []int64{3, 1}},
		"dead-letters all":      &DeadLetters{Now: 5, Subject: "s", ConsumerGroup: "g", Op: DeadPurge, All: true, Seqs: []int64{}},
		"dead-letters max":      &DeadLetters{Now: 5, Subject: long, ConsumerGroup: long, Op: 0xff, Seqs: seqs(MaxDeadLetterSeqs)},
		"dead-letters under":    &DeadLetters{Now: 5, Subject: "s", ConsumerGroup: "g", Op: DeadPurge, Seqs: seqs(MaxDeadLetterSeqs - 1)},
		"dead-letters by":       &DeadLetters{Now: 5, Subject: "s", ConsumerGroup: "g", Op: DeadResend, Seqs: []int64{1}, By: "app:ops"},
		"dead-letters by max":   &DeadLetters{Now: 5, Subject: "s", ConsumerGroup: "g", Op: DeadResend, Seqs: []int64{1}, By: strings.Repeat("b", MaxBy)},
		"pull v1":               &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Resend: true, From: 3, Start: StartEarliest, version: commandVersion},
		"pull v2":               &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Epoch: 5, Start: StartEarliest, version: commandVersionEpoch},
		"pull v3": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Epoch: 2, AtMostOnce: true, Tags: []string{"a"},
			TagsAll: true, Start: StartAtTime, StartAt: 1 << 41, IdleExpiry: 60_000, version: commandVersionPull3},
		"pull v3 max tags": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Tags: tags(message.MaxTags, message.MaxTagLen),
			Start: 0xff, StartAt: -1, IdleExpiry: math.MaxInt64, version: commandVersionPull3},
		"pull v3 under max tags": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Tags: tags(message.MaxTags-1, message.MaxTagLen-1), version: commandVersionPull3},
		"pull v4": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Epoch: 2, AtMostOnce: true, Tags: []string{"a"},
			Start: StartAtTime, StartAt: 1 << 41, IdleExpiry: 60_000, MaxBytes: 8 << 20},
		"pull v4 max bytes": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Resend: true, MaxBytes: math.MaxInt64},
		"pull v4 one byte":  &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, MaxBytes: 1},
		"pull v4 app": &Pull{Now: 6, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, App: strings.Repeat("a", limits.MaxName),
			MaxConsumers: limits.MaxConsumers},
		"forget idle": &Forget{Now: 7, Subject: "s", ConsumerGroup: "g", IdleFor: math.MaxInt64},
	}
}

// overLimitConsumeCommands are consumer commands with a count or length
// just over the decoder's limit, or a field wider than its type: Decode
// refuses every one.
func overLimitConsumeCommands() map[string][]byte {
	long := strings.Repeat("n", limits.MaxName+1)
	many := make([]message.AckRange, limits.MaxAckRanges+1)
	tags := make([]string, message.MaxTags+1)
	for i := range tags {
		tags[i] = "t"
	}
	setGroup := func(maxDeliveries, maxInFlight uint64) []byte {
		b := binenc.AppendString(binenc.AppendString(appendHeader(nil, CmdSetConsumerGroup, 1), "s"), "g")
		b = append(b, 0)
		for _, v := range []uint64{maxDeliveries, 0, 0, 0, maxInFlight, 0} {
			b = binenc.AppendUvarint(b, v)
		}
		return binenc.AppendUint64(append(b, 0), 0)
	}
	return map[string][]byte{
		"nack ranges":          (&Nack{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: many}).Encode(),
		"extend ranges":        (&Extend{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: many}).Encode(),
		"expire ranges":        (&Expire{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: many}).Encode(),
		"expire name":          (&Expire{Subject: long, ConsumerGroup: "g", Consumer: "c"}).Encode(),
		"dead-letters seqs":    (&DeadLetters{Subject: "s", ConsumerGroup: "g", Seqs: make([]int64, MaxDeadLetterSeqs+1)}).Encode(),
		"dead-letters name":    (&DeadLetters{Subject: "s", ConsumerGroup: long}).Encode(),
		"dead-letters by long": (&DeadLetters{Subject: "s", ConsumerGroup: "g", By: strings.Repeat("b", MaxBy+1)}).Encode(),
		"dead-letters by none": func() []byte { // version 2 naming nobody
			b := (&DeadLetters{Subject: "s", ConsumerGroup: "g", By: "x"}).Encode()
			return append(b[:len(b)-2], 0)
		}(),
		"set-group name":       (&SetConsumerGroup{Subject: long, ConsumerGroup: "g"}).Encode(),
		"reset-group name":     (&ResetConsumerGroup{Subject: "s", ConsumerGroup: long}).Encode(),
		"forget name":          (&Forget{Subject: long, ConsumerGroup: "g", IdleFor: 1}).Encode(),
		"pull tags":            (&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Tags: tags}).Encode(),
		"pull tag length":      (&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Tags: []string{strings.Repeat("t", message.MaxTagLen+1)}}).Encode(),
		"pull max bytes":       pullMaxBytes(1 << 63),
		"pull max consumers":   pullMaxConsumers(limits.MaxConsumers + 1),
		"pull flags":           pullFlags(4),
		"dead-letters all":     deadLettersAll(2),
		"set-group deliveries": setGroup(1<<32, 0),
		"set-group in flight":  setGroup(0, 1<<32),
	}
}

// pullMaxBytes returns a version 4 pull whose max-bytes field is v.
func pullMaxBytes(v uint64) []byte {
	b := (&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, version: commandVersionPull3}).Encode()
	b[1] = commandVersionPull4
	return append(binenc.AppendUvarint(b, v), 0, 0) // no application, max consumers 0
}

// pullMaxConsumers returns a version 4 pull of application "a" whose
// max-consumers field is v.
func pullMaxConsumers(v uint64) []byte {
	b := (&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, App: "a"}).Encode()
	return binenc.AppendUvarint(b[:len(b)-1], v) // max consumers 0 is one byte
}

// pullFlags returns a pull whose flags byte is v.
func pullFlags(v byte) []byte {
	b := appendNames(appendHeader(nil, CmdPull, 1), "s", "g", "c")
	b = binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendUvarint(b, 1), 0), 0) // max, from, epoch
	b = append(b, v, 0, 0)                                                           // flags, no tags, start
	b = binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendUint64(b, 0), 0), 0)  // start-at, idle expiry, max bytes
	return append(b, 0, 0)                                                           // no application, max consumers 0
}

// deadLettersAll returns a DeadLetters command whose all byte is v.
func deadLettersAll(v byte) []byte {
	b := binenc.AppendString(binenc.AppendString(appendHeaderVersion(nil, CmdDeadLetters, commandVersion, 1), "s"), "g")
	return binenc.AppendUvarint(append(b, byte(DeadPurge), v), 0)
}

func TestConsumeCommandsDecodeAtTheirLimits(t *testing.T) {
	for name, cmd := range sampleConsumeCommands() {
		enc := cmd.Encode()
		got, err := Decode(enc)
		if err != nil {
			t.Fatalf("%s: Decode: %v", name, err)
		}
		if again := got.(encoder).Encode(); !bytes.Equal(again, enc) {
			t.Fatalf("%s: re-encoded %x, want %x", name, again, enc)
		}
	}
	for name, b := range overLimitConsumeCommands() {
		if cmd, err := Decode(b); !errors.Is(err, ErrBadCommand) || cmd != nil {
			t.Fatalf("%s: Decode = %#v, %v; want ErrBadCommand", name, cmd, err)
		}
	}
	// Those built by hand are well-formed at the value before.
	for _, b := range [][]byte{pullFlags(pullAtMostOnce | pullTagsAll), deadLettersAll(1), pullMaxBytes(1<<63 - 1), pullMaxConsumers(limits.MaxConsumers)} {
		if _, err := Decode(b); err != nil {
			t.Fatalf("Decode(%x): %v", b, err)
		}
	}
}
