package fsm

import (
	"errors"
	"fmt"
	"math"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
)

// CommandType is the first byte of every Raft command. The values are
// written into the Raft log: never renumber them.
type CommandType uint8

// Command types.
const (
	CmdAppend             CommandType = 1
	CmdPull               CommandType = 2
	CmdAck                CommandType = 3
	CmdReclaim            CommandType = 4
	CmdMember             CommandType = 5
	CmdFire               CommandType = 6
	CmdForget             CommandType = 7
	CmdNack               CommandType = 8
	CmdExtend             CommandType = 9
	CmdExpire             CommandType = 10
	CmdSetConsumerGroup   CommandType = 11
	CmdResetConsumerGroup CommandType = 12
	CmdDeadLetters        CommandType = 13
	// CmdBrokerConfig changes the broker group's configuration
	// (SetBrokerConfig).
	CmdBrokerConfig CommandType = 14
	// CmdSetVersion raises the broker group's active version Number
	// (SetVersion; see apply_version.go).
	CmdSetVersion CommandType = 15
)

func (t CommandType) String() string {
	switch t {
	case CmdAppend:
		return "append"
	case CmdPull:
		return "pull"
	case CmdAck:
		return "ack"
	case CmdReclaim:
		return "reclaim"
	case CmdMember:
		return "member"
	case CmdFire:
		return "fire"
	case CmdForget:
		return "forget"
	case CmdNack:
		return "nack"
	case CmdExtend:
		return "extend"
	case CmdExpire:
		return "expire"
	case CmdSetConsumerGroup:
		return "set-group"
	case CmdResetConsumerGroup:
		return "reset-group"
	case CmdDeadLetters:
		return "dead-letters"
	case CmdBrokerConfig:
		return "broker-config"
	case CmdSetVersion:
		return "set-version"
	}
	return fmt.Sprintf("command(%d)", uint8(t))
}

// commandVersion is the second byte of every command: the version of the
// payload encoding that follows. Pull, Ack and Reclaim version 2 adds the
// consumer's epoch; Pull version 3 adds how the consumer pulls (tags,
// at-most-once) and where a new group starts, version 4 the bytes it may
// hand out and the tag check of redeliveries; Forget version 2 adds the
// idle condition; Append version 2 names the applications sending (it is
// written only when one does), version 3 the clients' addresses too (only
// when one is known); DeadLetters version 2 names who asked (only when
// someone did). Every earlier version is still read, since
// a Raft log may hold it.
const (
	commandVersion           = 1
	commandVersionEpoch      = 2
	commandVersionPull3      = 3
	commandVersionPull4      = 4
	commandVersionAppendApps = 2
	commandVersionAppendAddr = 3
	commandVersionDeadBy     = 2
)

// versionOf returns the version a command type is written in.
func versionOf(t CommandType) byte {
	switch t {
	case CmdPull:
		return commandVersionPull4
	case CmdAck, CmdReclaim, CmdForget:
		return commandVersionEpoch
	case CmdAppend:
		return commandVersionAppendAddr
	case CmdDeadLetters:
		return commandVersionDeadBy
	}
	return commandVersion
}

// MaxBy bounds who a command says asked for it ("app:" or "node:" and a
// name); a longer name is cut.
const MaxBy = limits.MaxName + 8

// ErrBadCommand means a command's bytes do not decode. Apply refuses such
// a command alike on every replica (the bytes are the same everywhere).
var ErrBadCommand = errors.New("fsm: malformed command")

// ErrUnknownCommand means a command's type or payload version is one this
// build does not know (it wraps ErrBadCommand): a leader of a newer
// version proposed it. Apply stops the node rather than skip it, because
// replicas that know it apply it: the node must be upgraded.
var ErrUnknownCommand = fmt.Errorf("%w: unknown type or version", ErrBadCommand)

// Every command starts with the same header:
//
//	type u8 | version u8 | now i64 (leader-stamped Unix milliseconds)
//
// followed by its own payload, described on its type.

// Append adds a batch of messages. Payload, version 1:
//
//	count uvarint | message…   (message.Message encoding; index and appended-at are ignored)
//
// Version 2, written when any message has an application (Senders),
// names the applications first, each with its limit of delayed messages
// pending, and each message's by its place among them:
//
//	apps uvarint | (code string | max-delayed uvarint)… | count uvarint | (sender uvarint | message)…
//
// Version 3, written when any sender has an address, adds after each
// application's max-delayed the client's address (a string): a sender is
// then an application at an address, and one application may be named
// once per address.
type Append struct {
	Now      int64
	Messages []*message.Message
	// Wire, when set, holds each message's encoding as it arrived
	// (message.ReadWire): Wire[i] encodes Messages[i]. Encode copies it
	// and apply stores it (logs.MessageLog.AppendWire) instead of encoding
	// the message again. Decode sets it.
	Wire [][]byte
	// Apps are the applications sending the batch's messages, with their
	// limits; Senders, nil when no message has an application, holds for
	// each message 1 + its application's index in Apps, or 0 for none (a
	// node, or authentication off).
	Apps    []Sender
	Senders []int
}

// Sender is an application sending an Append's messages and what the
// leader's table of applications says it may hold of this broker group:
// MaxDelayed delayed messages pending.
type Sender struct {
	App        string
	MaxDelayed int64
	// Addr is the client's address as the leader saw it, for the
	// message's timeline ("" if unknown). Version 3 on.
	Addr string
}

// sender returns message i's application, nil for none (a sender of
// version 3 may be an address alone).
func (c *Append) sender(i int) *Sender {
	if c.Senders == nil || c.Senders[i] == 0 {
		return nil
	}
	if s := &c.Apps[c.Senders[i]-1]; s.App != "" || s.Addr == "" {
		return s
	}
	return nil
}

// wire returns message i's encoding: as it arrived, or encoded now.
func (c *Append) wire(i int) []byte {
	if c.Wire != nil {
		return c.Wire[i]
	}
	return c.Messages[i].AppendEncoded(nil)
}

// Pull hands up to Max entries of Subject to Consumer of Group, first any
// its group has to hand out again, then from the group's cursor; with Tags,
// only messages whose tags match (any of them, or with TagsAll all),
// stepping the cursor over the rest. With AtMostOnce the entries count as
// acknowledged as they are handed out: never handed out again. A pull that
// creates its group starts it at Start (StartAt for StartAtTime), with
// IdleExpiry as its setting. With
// Resend, From is the consumer's next expected pull sequence: entries it
// was handed at or after From and has not acked are handed again first,
// because the reply that carried them never reached it. Epoch names the
// registration From belongs to (0: whichever holds the name now, as a
// restarted consumer taking over asks); an ended one has seen no reply of
// the current registration, which then hands again all it holds unacked.
// With MaxBytes (version 4), it hands out entries while their messages'
// record sizes add up to at most MaxBytes, and none if not even the first
// fits (the result's Need says what it needs): the leader has that much
// memory for the reply, so everything handed out reaches the reply. 0 is
// no bound. App (version 4) is the application pulling ("" for none), and
// MaxConsumers what the leader's table of applications says it may have
// registered at once in this broker group: a new consumer of App past it
// is refused, and a new group is recorded as App's. Payload:
//
//	subject | group | consumer | max uvarint | resend-from uvarint (From+1 with Resend, else 0) |
//	epoch uvarint (version 2) |
//	flags u8 (1 at-most-once, 2 tags-all) | tag-count uvarint | tags… |
//	start u8 | start-at i64 | idle-expiry uvarint (version 3) |
//	max-bytes uvarint | app string | max-consumers uvarint (version 4)
//
// A pull keeps the version it was decoded from, and is encoded and applied
// as that version was: a version 1 or 2 pull creates a group at its
// subject's earliest retained message and registers nothing for a subject
// without messages; before version 4 a tag-filtered pull hands out
// redeliveries whatever their tags.
type Pull struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Max                              int
	Resend                           bool
	From                             int64
	Epoch                            uint64
	AtMostOnce                       bool
	Tags                             []string
	TagsAll                          bool
	Start                            StartPosition
	StartAt                          int64  // Unix milliseconds, with StartAtTime
	IdleExpiry                       int64  // milliseconds
	MaxBytes                         int64  // version 4; 0 for no bound
	App                              string // version 4; "" for none
	MaxConsumers                     int    // version 4, with App
	version                          byte   // decoded from this earlier version; 0 for the current one
}

// pullVersion returns the version c is encoded and applied as.
func (c *Pull) pullVersion() byte {
	if c.version != 0 {
		return c.version
	}
	return commandVersionPull4
}

// legacy reports whether c is of version 1 or 2, which created groups at
// the earliest message and registered nothing without messages.
func (c *Pull) legacy() bool { return c.pullVersion() < commandVersionPull3 }

// Pull flags (version 3).
const (
	pullAtMostOnce = 1 << iota
	pullTagsAll
)

// Ack acknowledges pull sequences of one consumer, in any order, if the
// consumer's registration is still Epoch (0, in a version 1 command: any).
// Payload:
//
//	subject | group | consumer | [epoch uvarint, version 2] | count uvarint | (first uvarint, last uvarint)…
type Ack struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
	Ranges                           []message.AckRange
}

// Reclaim hands a consumer's unacked entries back to its group and forgets
// it, if its registration is still Epoch (0, in a version 1 command: any).
// Payload:
//
//	subject | group | consumer | [epoch uvarint, version 2]
type Reclaim struct {
	Now                              int64
	Subject, ConsumerGroup, Consumer string
	Epoch                            uint64
}

// Forget removes a consumer group of a subject from the state, with all its
// consumers: an operator clearing away a group that is gone. If the group
// pulls again it starts afresh. With IdleFor, only a group without
// consumers since at least that long before Now goes (a leader expiring
// idle groups; one that came back meanwhile stays). Payload:
//
//	subject | group | idle-for uvarint (milliseconds, version 2)
type Forget struct {
	Now                    int64
	Subject, ConsumerGroup string
	IdleFor                int64
}

// SetMember records a group member's client address, so that any node can
// send clients to the leader; an empty address removes the member. Payload:
//
//	id | client-address
type SetMember struct {
	Now        int64
	ID         string
	ClientAddr string
}

// Fire delivers delayed messages that are due: each named schedule entry
// not yet fired moves into the message log and its subject's consume log.
// An entry already fired, or not due at Now, is passed over, so a Fire may
// be proposed again after a leader change. Payload:
//
//	count uvarint | ref u64…   (schedule references, delaywheel.MakeRef)
type Fire struct {
	Now  int64
	Refs []uint64
}

func appendHeader(b []byte, t CommandType, now int64) []byte {
	return appendHeaderVersion(b, t, versionOf(t), now)
}

func appendHeaderVersion(b []byte, t CommandType, v byte, now int64) []byte {
	b = append(b, byte(t), v)
	return binenc.AppendUint64(b, uint64(now))
}

func appendNames(b []byte, subject, group, consumer string) []byte {
	b = binenc.AppendString(b, subject)
	b = binenc.AppendString(b, group)
	return binenc.AppendString(b, consumer)
}

// hasAddr reports whether any sender names an address (version 3).
func (c *Append) hasAddr() bool {
	for _, a := range c.Apps {
		if a.Addr != "" {
			return true
		}
	}
	return false
}

// Encode returns the command's bytes.
func (c *Append) Encode() []byte {
	var b []byte
	if c.Senders == nil {
		b = append(b, byte(CmdAppend), commandVersion)
		b = binenc.AppendUint64(b, uint64(c.Now))
	} else {
		v := byte(commandVersionAppendApps)
		if c.hasAddr() {
			v = commandVersionAppendAddr
		}
		b = appendHeaderVersion(nil, CmdAppend, v, c.Now)
		b = binenc.AppendUvarint(b, uint64(len(c.Apps)))
		for _, a := range c.Apps {
			b = binenc.AppendUvarint(binenc.AppendString(b, a.App), uint64(a.MaxDelayed))
			if v >= commandVersionAppendAddr {
				b = binenc.AppendString(b, a.Addr)
			}
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(c.Messages)))
	for i, m := range c.Messages {
		if c.Senders != nil {
			b = binenc.AppendUvarint(b, uint64(c.Senders[i]))
		}
		if c.Wire != nil {
			b = append(b, c.Wire[i]...)
		} else {
			b = m.AppendEncoded(b)
		}
	}
	return b
}

// Encode returns the command's bytes, in the version it was decoded from
// (the current one for a new command).
func (c *Pull) Encode() []byte {
	v := c.pullVersion()
	b := appendNames(appendHeaderVersion(nil, CmdPull, v, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	b = binenc.AppendUvarint(b, uint64(c.Max))
	from := uint64(0)
	if c.Resend {
		from = uint64(c.From) + 1
	}
	b = binenc.AppendUvarint(b, from)
	if v >= commandVersionEpoch {
		b = binenc.AppendUvarint(b, c.Epoch)
	}
	if v < commandVersionPull3 {
		return b
	}
	flags := byte(0)
	if c.AtMostOnce {
		flags |= pullAtMostOnce
	}
	if c.TagsAll {
		flags |= pullTagsAll
	}
	b = append(b, flags)
	b = binenc.AppendUvarint(b, uint64(len(c.Tags)))
	for _, t := range c.Tags {
		b = binenc.AppendString(b, t)
	}
	b = append(b, byte(c.Start))
	b = binenc.AppendUint64(b, uint64(c.StartAt))
	b = binenc.AppendUvarint(b, uint64(c.IdleExpiry))
	if v < commandVersionPull4 {
		return b
	}
	b = binenc.AppendString(binenc.AppendUvarint(b, uint64(c.MaxBytes)), c.App)
	return binenc.AppendUvarint(b, uint64(c.MaxConsumers))
}

// Encode returns the command's bytes.
func (c *Ack) Encode() []byte {
	b := appendNames(appendHeader(nil, CmdAck, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	return appendRanges(binenc.AppendUvarint(b, c.Epoch), c.Ranges)
}

// Encode returns the command's bytes.
func (c *Reclaim) Encode() []byte {
	b := appendNames(appendHeader(nil, CmdReclaim, c.Now), c.Subject, c.ConsumerGroup, c.Consumer)
	return binenc.AppendUvarint(b, c.Epoch)
}

// Encode returns the command's bytes.
func (c *Forget) Encode() []byte {
	b := binenc.AppendString(appendHeader(nil, CmdForget, c.Now), c.Subject)
	b = binenc.AppendString(b, c.ConsumerGroup)
	return binenc.AppendUvarint(b, uint64(c.IdleFor))
}

// Encode returns the command's bytes.
func (c *SetMember) Encode() []byte {
	b := binenc.AppendString(appendHeader(nil, CmdMember, c.Now), c.ID)
	return binenc.AppendString(b, c.ClientAddr)
}

// Encode returns the command's bytes.
func (c *Fire) Encode() []byte {
	b := binenc.AppendUvarint(appendHeader(nil, CmdFire, c.Now), uint64(len(c.Refs)))
	for _, ref := range c.Refs {
		b = binenc.AppendUint64(b, ref)
	}
	return b
}

// Encode returns the command's bytes.
func (c *SetVersion) Encode() []byte {
	return binenc.AppendUvarint(appendHeader(nil, CmdSetVersion, c.Now), uint64(c.Version))
}

// Decode decodes a command: *Append, *Pull, *Ack, *Reclaim, *SetMember,
// *Fire, *Forget, *SetBrokerConfig, *SetVersion or one of
// command_consume.go.
func Decode(b []byte) (any, error) {
	r := binenc.NewReader(b)
	t := CommandType(r.Byte())
	v := r.Byte()
	if r.Err() == nil && (v < commandVersion || v > versionOf(t)) {
		return nil, fmt.Errorf("%w: %s version %d", ErrUnknownCommand, t, v)
	}
	epoch := func() uint64 { // the field version 2 adds
		if v >= commandVersionEpoch {
			return r.Uvarint()
		}
		return 0
	}
	now := r.Int64()
	var cmd any
	switch t {
	case CmdAppend:
		c := &Append{Now: now}
		if v >= commandVersionAppendApps {
			c.Apps = make([]Sender, r.Count(limits.MaxBatchMessages))
			for i := range c.Apps {
				app, most := r.String(limits.MaxName), r.Uvarint()
				if most > limits.MaxDelayed {
					return nil, fmt.Errorf("%w: append: application %d's max delayed %d over %d", ErrBadCommand, i, most, limits.MaxDelayed)
				}
				c.Apps[i] = Sender{App: app, MaxDelayed: int64(most)}
				if v >= commandVersionAppendAddr {
					c.Apps[i].Addr = r.String(limits.MaxAddr)
				}
			}
			if v >= commandVersionAppendAddr && r.Err() == nil && !c.hasAddr() {
				// Version 2 holds it: a command has one encoding.
				return nil, fmt.Errorf("%w: append version 3 naming no address", ErrBadCommand)
			}
		}
		n := r.Count(limits.MaxBatchMessages)
		if v >= commandVersionAppendApps {
			c.Senders = make([]int, 0, n)
		}
		for i := 0; i < n && r.Err() == nil; i++ {
			if c.Senders != nil {
				s := r.Uvarint()
				if s > uint64(len(c.Apps)) {
					return nil, fmt.Errorf("%w: append message %d names application %d of %d", ErrBadCommand, i, s, len(c.Apps))
				}
				c.Senders = append(c.Senders, int(s))
			}
			m, wire, err := message.ReadWire(r)
			if err != nil {
				return nil, fmt.Errorf("%w: append message %d: %w", ErrBadCommand, i, err)
			}
			c.Messages, c.Wire = append(c.Messages, m), append(c.Wire, wire)
		}
		cmd = c
	case CmdPull:
		c := &Pull{Now: now}
		c.Subject, c.ConsumerGroup, c.Consumer = readNames(r)
		c.Max = int(r.Uvarint())
		if from := r.Uvarint(); from > 0 {
			c.Resend, c.From = true, int64(from-1)
		}
		c.Epoch = epoch()
		if v < versionOf(CmdPull) {
			c.version = v
		}
		c.Start = StartEarliest // what versions 1 and 2 did
		if !c.legacy() {
			if err := readPullOptions(r, c); err != nil {
				return nil, err
			}
		}
		if v >= commandVersionPull4 {
			if c.MaxBytes = int64(r.Uvarint()); c.MaxBytes < 0 {
				return nil, fmt.Errorf("%w: pull: max bytes %d over 63 bits", ErrBadCommand, uint64(c.MaxBytes))
			}
			c.App = r.String(limits.MaxName)
			n := r.Uvarint()
			if n > limits.MaxConsumers {
				return nil, fmt.Errorf("%w: pull: max consumers %d over %d", ErrBadCommand, n, limits.MaxConsumers)
			}
			c.MaxConsumers = int(n)
		}
		cmd = c
	case CmdAck:
		c := &Ack{Now: now}
		c.Subject, c.ConsumerGroup, c.Consumer = readNames(r)
		c.Epoch = epoch()
		c.Ranges = readRanges(r)
		cmd = c
	case CmdReclaim:
		c := &Reclaim{Now: now}
		c.Subject, c.ConsumerGroup, c.Consumer = readNames(r)
		c.Epoch = epoch()
		cmd = c
	case CmdMember:
		cmd = &SetMember{Now: now, ID: r.String(limits.MaxName), ClientAddr: r.String(limits.MaxAddr)}
	case CmdFire:
		c := &Fire{Now: now}
		n := r.Count(limits.MaxFireRefs)
		c.Refs = make([]uint64, 0, n)
		for i := 0; i < n && r.Err() == nil; i++ {
			c.Refs = append(c.Refs, r.Uint64())
		}
		cmd = c
	case CmdForget:
		c := &Forget{Now: now, Subject: r.String(limits.MaxName), ConsumerGroup: r.String(limits.MaxName)}
		if v >= commandVersionEpoch {
			c.IdleFor = int64(r.Uvarint())
		}
		cmd = c
	case CmdBrokerConfig:
		c, err := decodeSetBrokerConfig(now, r)
		if err != nil {
			return nil, err
		}
		cmd = c
	case CmdSetVersion:
		n := r.Uvarint()
		if r.Err() == nil && (n == 0 || n > math.MaxUint32) {
			return nil, fmt.Errorf("%w: set-version: version %d", ErrBadCommand, n)
		}
		cmd = &SetVersion{Now: now, Version: version.Number(n)}
	default:
		c, ok, err := decodeConsumeCommand(t, now, r)
		if err != nil {
			return nil, err
		}
		if ok {
			if dl, isDead := c.(*DeadLetters); isDead && v >= commandVersionDeadBy {
				if dl.By = r.String(MaxBy); r.Err() == nil && dl.By == "" {
					// Version 1 holds it: a command has one encoding.
					return nil, fmt.Errorf("%w: dead-letters version 2 naming nobody", ErrBadCommand)
				}
			}
			cmd = c
			break
		}
		if r.Err() == nil {
			return nil, fmt.Errorf("%w: type %d", ErrUnknownCommand, t)
		}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadCommand, t, err)
	}
	return cmd, nil
}

// readPullOptions reads what Pull version 3 adds.
func readPullOptions(r *binenc.Reader, c *Pull) error {
	flags := r.Byte()
	if flags&^(pullAtMostOnce|pullTagsAll) != 0 {
		// Unknown flags would be dropped when it is encoded again: a command
		// has one encoding.
		return fmt.Errorf("%w: pull: unknown flags %#x", ErrBadCommand, flags)
	}
	c.AtMostOnce, c.TagsAll = flags&pullAtMostOnce != 0, flags&pullTagsAll != 0
	if n := r.Count(message.MaxTags); n > 0 {
		c.Tags = make([]string, n)
		for i := range c.Tags {
			c.Tags[i] = r.String(message.MaxTagLen)
		}
	}
	c.Start = StartPosition(r.Byte())
	c.StartAt = r.Int64()
	c.IdleExpiry = int64(r.Uvarint())
	return nil
}

func readNames(r *binenc.Reader) (subject, group, consumer string) {
	return r.String(limits.MaxName), r.String(limits.MaxName), r.String(limits.MaxName)
}
