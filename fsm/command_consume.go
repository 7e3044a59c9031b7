package fsm

import (
	"fmt"
	"math"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// The commands of consumer groups beyond pull and ack: the outcome of a
// delivery other than an ack (a nack, more time, a timeout), a group's
// settings and position, and its dead letters.

// Nack says a consumer failed to process pull sequences of Epoch: each is
// done for the consumer and comes back to the group (the group only) at
// RetryAt, or, with RetryAt 0, after the group's backoff for its delivery
// count; a message already handed out MaxDeliveries times becomes a dead
// letter instead. Sequences already done are passed over. Payload:
//
//	subject | group | consumer | epoch uvarint | retry-at i64 | count uvarint | (first uvarint, last uvarint)…
type Nack struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	RetryAt                          int64 // Unix milliseconds; 0 for the group's backoff
	Ranges                           []message.AckRange
}

// Extend gives unacked pull sequences of Epoch the group's whole ack wait
// again, from Now: a handler still at work says so. Payload:
//
//	subject | group | consumer | epoch uvarint | count uvarint | (first uvarint, last uvarint)…
type Extend struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	Ranges                           []message.AckRange
}

// Expire hands the group again the pull sequences of Epoch whose ack wait
// has passed at Now (a leader proposes it for what Overdue finds); any
// other named sequence is passed over. Payload as Extend's.
type Expire struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	Ranges                           []message.AckRange
}

// SetConsumerGroup changes a consumer group's settings, creating the group (at
// Start) if it does not exist. Only the fields named by Set change.
// Payload:
//
//	subject | group | set u8 (setting bits) | max-deliveries uvarint | retry-first uvarint |
//	retry-max uvarint | ack-wait uvarint | max-in-flight uvarint | idle-expiry uvarint |
//	start u8 | start-at i64
type SetConsumerGroup struct {
	Now                    int64
	Subject, ConsumerGroup string
	Set                    SettingBits
	Settings               ConsumerGroupSettings
	Start                  StartPosition
	StartAt                int64
}

// SettingBits names fields of ConsumerGroupSettings.
type SettingBits uint8

// Setting bits.
const (
	SetMaxDeliveries SettingBits = 1 << iota
	SetRetryFirst
	SetRetryMax
	SetAckWait
	SetMaxInFlight
	SetIdleExpiry
	setAll = SetMaxDeliveries | SetRetryFirst | SetRetryMax | SetAckWait | SetMaxInFlight | SetIdleExpiry
)

// apply returns s with the fields of o that bits name.
func (bits SettingBits) apply(s, o ConsumerGroupSettings) ConsumerGroupSettings {
	if bits&SetMaxDeliveries != 0 {
		s.MaxDeliveries = o.MaxDeliveries
	}
	if bits&SetRetryFirst != 0 {
		s.RetryFirst = o.RetryFirst
	}
	if bits&SetRetryMax != 0 {
		s.RetryMax = o.RetryMax
	}
	if bits&SetAckWait != 0 {
		s.AckWait = o.AckWait
	}
	if bits&SetMaxInFlight != 0 {
		s.MaxInFlight = o.MaxInFlight
	}
	if bits&SetIdleExpiry != 0 {
		s.IdleExpiry = o.IdleExpiry
	}
	return s
}

// ResetConsumerGroup moves a consumer group's cursor to To (StartAt for
// StartAtTime): the messages before it count as consumed, those after as
// not. What the group had to hand out again is dropped, and retries it
// scheduled are dropped when they fire; its dead letters and what its
// consumers hold unacked stay. A group that does not exist is created
// there. Payload:
//
//	subject | group | to u8 | at i64
type ResetConsumerGroup struct {
	Now                    int64
	Subject, ConsumerGroup string
	To                     StartPosition
	At                     int64
}

// DeadLetterOp is what a DeadLetters command does.
type DeadLetterOp uint8

// Dead-letter operations.
const (
	// DeadResend hands the dead letters to the group again, their
	// delivery count starting afresh.
	DeadResend DeadLetterOp = 1
	// DeadPurge removes them.
	DeadPurge DeadLetterOp = 2
)

// DeadLetters resends or purges dead letters of a group: those with the
// named consume-log sequences, or with All every one. Sequences that are
// not dead letters of the group are passed over. Payload:
//
//	subject | group | op u8 | all u8 | count uvarint | seq uvarint…
type DeadLetters struct {
	Now                    int64
	Subject, ConsumerGroup string
	Op                     DeadLetterOp
	All                    bool
	Seqs                   []int64
	// By is who asked, for the messages' timelines: "app:CODE" or
	// "node:ID", "" for none (authentication off). Version 2 on, written
	// only when set.
	By string
}

// MaxDeadLetterSeqs bounds the sequences one DeadLetters command names.
const MaxDeadLetterSeqs = limits.MaxPullMessages

func appendRanges(b []byte, ranges []message.AckRange) []byte {
	b = binenc.AppendUvarint(b, uint64(len(ranges)))
	for _, r := range ranges {
		b = binenc.AppendUvarint(b, uint64(r.First))
		b = binenc.AppendUvarint(b, uint64(r.Last))
	}
	return b
}

func readRanges(r *binenc.Reader) []message.AckRange {
	n := r.Count(limits.MaxAckRanges)
	out := make([]message.AckRange, 0, n)
	for i := 0; i < n && r.Err() == nil; i++ {
		out = append(out, message.AckRange{First: int64(r.Uvarint()), Last: int64(r.Uvarint())})
	}
	return out
}

// Encode returns the command's bytes.
func (c *Nack) Encode() []byte {
	b := appendNames(appendHeader(nil, CmdNack, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	b = binenc.AppendUvarint(b, c.Epoch)
	b = binenc.AppendUint64(b, uint64(c.RetryAt))
	return appendRanges(b, c.Ranges)
}

// Encode returns the command's bytes.
func (c *Extend) Encode() []byte {
	b := appendNames(appendHeader(nil, CmdExtend, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	return appendRanges(binenc.AppendUvarint(b, c.Epoch), c.Ranges)
}

// Encode returns the command's bytes.
func (c *Expire) Encode() []byte {
	b := appendNames(appendHeader(nil, CmdExpire, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	return appendRanges(binenc.AppendUvarint(b, c.Epoch), c.Ranges)
}

// Encode returns the command's bytes.
func (c *SetConsumerGroup) Encode() []byte {
	b := binenc.AppendString(appendHeader(nil, CmdSetConsumerGroup, c.Now), c.Subject)
	b = binenc.AppendString(b, c.ConsumerGroup)
	b = append(b, byte(c.Set))
	s := c.Settings
	for _, v := range []uint64{uint64(s.MaxDeliveries), uint64(s.RetryFirst), uint64(s.RetryMax), uint64(s.AckWait),
		uint64(s.MaxInFlight), uint64(s.IdleExpiry)} {
		b = binenc.AppendUvarint(b, v)
	}
	b = append(b, byte(c.Start))
	return binenc.AppendUint64(b, uint64(c.StartAt))
}

// Encode returns the command's bytes.
func (c *ResetConsumerGroup) Encode() []byte {
	b := binenc.AppendString(appendHeader(nil, CmdResetConsumerGroup, c.Now), c.Subject)
	b = binenc.AppendString(b, c.ConsumerGroup)
	b = append(b, byte(c.To))
	return binenc.AppendUint64(b, uint64(c.At))
}

// Encode returns the command's bytes.
func (c *DeadLetters) Encode() []byte {
	v := byte(commandVersion)
	if c.By != "" {
		v = commandVersionDeadBy
	}
	b := binenc.AppendString(appendHeaderVersion(nil, CmdDeadLetters, v, c.Now), c.Subject)
	b = binenc.AppendString(b, c.ConsumerGroup)
	all := byte(0)
	if c.All {
		all = 1
	}
	b = append(b, byte(c.Op), all)
	b = binenc.AppendUvarint(b, uint64(len(c.Seqs)))
	for _, s := range c.Seqs {
		b = binenc.AppendUvarint(b, uint64(s))
	}
	if c.By != "" {
		b = binenc.AppendString(b, c.By)
	}
	return b
}

// decodeConsumeCommand decodes the payload of one of this file's commands;
// false if t is none of them. An error wraps ErrBadCommand.
func decodeConsumeCommand(t CommandType, now int64, r *binenc.Reader) (any, bool, error) {
	switch t {
	case CmdNack:
		c := &Nack{Now: now}
		c.Subject, c.ConsumerGroup, c.Consumer = readNames(r)
		c.Epoch = r.Uvarint()
		c.RetryAt = r.Int64()
		c.Ranges = readRanges(r)
		return c, true, nil
	case CmdExtend, CmdExpire:
		subject, group, consumer := readNames(r)
		epoch, ranges := r.Uvarint(), readRanges(r)
		if t == CmdExtend {
			return &Extend{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Epoch: epoch, Ranges: ranges}, true, nil
		}
		return &Expire{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Epoch: epoch, Ranges: ranges}, true, nil
	case CmdSetConsumerGroup:
		c := &SetConsumerGroup{Now: now, Subject: r.String(limits.MaxName), ConsumerGroup: r.String(limits.MaxName)}
		c.Set = SettingBits(r.Byte())
		var v [6]uint64
		for i := range v {
			v[i] = r.Uvarint()
		}
		if v[0] > math.MaxUint32 || v[4] > math.MaxUint32 {
			// Clamped, it would re-encode differently: a command has one
			// encoding.
			return nil, true, fmt.Errorf("%w: set-group: max deliveries %d or max in flight %d over 32 bits", ErrBadCommand, v[0], v[4])
		}
		c.Settings = ConsumerGroupSettings{MaxDeliveries: uint32(v[0]), RetryFirst: int64(v[1]), RetryMax: int64(v[2]), AckWait: int64(v[3]),
			MaxInFlight: uint32(v[4]), IdleExpiry: int64(v[5])}
		c.Start = StartPosition(r.Byte())
		c.StartAt = r.Int64()
		return c, true, nil
	case CmdResetConsumerGroup:
		c := &ResetConsumerGroup{Now: now, Subject: r.String(limits.MaxName), ConsumerGroup: r.String(limits.MaxName)}
		c.To = StartPosition(r.Byte())
		c.At = r.Int64()
		return c, true, nil
	case CmdDeadLetters:
		c := &DeadLetters{Now: now, Subject: r.String(limits.MaxName), ConsumerGroup: r.String(limits.MaxName)}
		c.Op = DeadLetterOp(r.Byte())
		all := r.Byte()
		if all > 1 {
			// Read as false, it would re-encode differently: a command has
			// one encoding.
			return nil, true, fmt.Errorf("%w: dead-letters: all is %d, not 0 or 1", ErrBadCommand, all)
		}
		c.All = all == 1
		n := r.Count(MaxDeadLetterSeqs)
		c.Seqs = make([]int64, 0, n)
		for i := 0; i < n && r.Err() == nil; i++ {
			c.Seqs = append(c.Seqs, int64(r.Uvarint()))
		}
		return c, true, nil
	}
	return nil, false, nil
}
