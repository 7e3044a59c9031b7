package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/qmqgo/qmq/internal/limits"
)

// A frame on the wire:
//
//	+-----------+--------+-------------+------------------+
//	| length    | type   | request id  | payload          |
//	| u32 LE    | u8     | u64 LE      | length - 9 bytes |
//	+-----------+--------+-------------+------------------+
//
// length counts the bytes after itself. A request's type is one of the
// Type values; the response to it carries the same type with ResponseBit set
// and the same request id, so many requests can be in flight on one
// connection and answered in any order. A response payload starts with a
// status:
//
//	code u8 | (message string | leader string, when code is not OK) | body
const (
	frameHeader = 4 + 1 + 8
	// DefaultMaxFrame is the largest frame accepted unless configured.
	DefaultMaxFrame = limits.MaxFrame
	// ResponseBit marks a response's type.
	ResponseBit = 0x80
)

// Type is a request type. The values are part of the protocol: never
// renumber them.
type Type uint8

// Request types.
const (
	TypeSend      Type = 1
	TypePull      Type = 2
	TypeAck       Type = 3
	TypeHeartbeat Type = 4
	TypeStatus    Type = 5
	TypeJoin      Type = 6
	TypeLeave     Type = 7
	TypeTransfer  Type = 8

	// Metaserver requests. Brokers forward them to their metaserver, so a
	// client may send them to any node of the cluster.
	TypeRoute           Type = 9  // where a subject lives
	TypeRegister        Type = 10 // a broker node announces itself
	TypeBrokerHeartbeat Type = 11 // a broker node reports its position
	TypeCluster         Type = 12 // every group, its nodes and their positions
	TypeAssign          Type = 13 // route a subject to more broker groups
	TypeSetWritable     Type = 14 // drain a broker group, or open it again
	TypeSubjects        Type = 15 // every subject's route
	TypeDeregister      Type = 16 // forget a broker node that left its group

	// TypeDelays asks a broker node for its group's pending delayed
	// messages, by hour and by subject, from its own replica.
	TypeDelays Type = 17

	// TypeForgetConsumerGroup asks a broker group's leader to remove a consumer
	// group of a subject from its state (an operator clearing away a group
	// that is gone).
	TypeForgetConsumerGroup Type = 18

	// TypeMetaForgetConsumerGroup asks the metaserver to forget its record of a
	// consumer group of a subject (ForgetConsumerGroupRequest); brokers forward it.
	TypeMetaForgetConsumerGroup Type = 19

	// TypeTime asks a broker node for its wall clock. A new leader asks its
	// group's voters before it stamps or fires anything, and bounds its own
	// clock by theirs.
	TypeTime Type = 20

	// TypeNack says a consumer failed to process messages (NackRequest):
	// they come back to its group after a retry delay, or become dead
	// letters.
	TypeNack Type = 21
	// TypeExtend says a consumer is still at work on messages
	// (ExtendRequest): their ack wait starts again.
	TypeExtend Type = 22
	// TypeConsumerGroups asks a broker group's leader for its consumer groups
	// (ConsumerGroupsRequest, JSON; answered with []ConsumerGroupInfo).
	TypeConsumerGroups Type = 23
	// TypeSetConsumerGroup changes a consumer group's settings (SetConsumerGroupRequest, JSON).
	TypeSetConsumerGroup Type = 24
	// TypeResetConsumerGroup moves a consumer group's position (ResetConsumerGroupRequest, JSON).
	TypeResetConsumerGroup Type = 25
	// TypeDeadLetters lists a consumer group's dead letters, or reads one
	// (DeadLettersRequest, JSON; answered with DeadLetterPage).
	TypeDeadLetters Type = 26
	// TypeDeadLetterOp resends or purges dead letters (DeadLetterOpRequest, JSON).
	TypeDeadLetterOp Type = 27
	// TypeHello names the application a connection works for and proves
	// it (HelloRequest); a client sends it first.
	TypeHello Type = 28

	// The application registry: metaserver requests (apps.go), which
	// brokers forward.

	// TypeApps lists the applications (no payload; answered with []AppInfo).
	TypeApps Type = 29
	// TypeAppPut creates an application or replaces its rights (AppRequest;
	// a creation is answered with its AppSecret).
	TypeAppPut Type = 30
	// TypeAppRotate gives an application a new secret (AppRotateRequest;
	// answered with AppSecret).
	TypeAppRotate Type = 31
	// TypeAppDelete forgets an application (AppDeleteRequest).
	TypeAppDelete Type = 32

	// TypeBrokerConfig asks a broker node for its broker group's
	// configuration as its replica holds it (no payload; answered with
	// BrokerConfigInfo, JSON). A new leader asks its voters too: a node of
	// an earlier release answers UNKNOWN_TYPE.
	TypeBrokerConfig Type = 33
	// TypeSetBrokerConfig changes a broker group's configuration, through
	// its leader (SetBrokerConfigRequest, JSON; answered with
	// BrokerConfigInfo).
	TypeSetBrokerConfig Type = 34
	// TypeRegisterConsumer registers a consumer as a pull does, creating
	// its consumer group at the request's start position if it does not
	// exist, and hands out nothing (a PullRequest, whose Max and Wait are
	// not used; answered with a PullResponse without messages, naming the
	// registration's epoch). The SDK's NewPuller and Subscribe make one in
	// every broker group of the subject before they return, so that a new
	// group starting at the latest message gets what is sent after.
	TypeRegisterConsumer Type = 35
	// TypeMessages finds messages in a broker group by id, or lists a
	// subject's by time or from a sequence, without consuming them
	// (MessagesRequest, JSON; answered with MessagesPage).
	TypeMessages Type = 36
	// TypeSetVersion raises a group's active version Number
	// (SetVersionRequest, JSON; answered with SetVersionResponse): qmqctl
	// upgrade finalize.
	TypeSetVersion Type = 37
	// TypeBackup asks a group's leader for one chunk of a snapshot of the
	// group's whole state (BackupRequest, JSON; answered with a
	// BackupChunk, binary): qmqctl backup.
	TypeBackup Type = 38
)

func (t Type) String() string {
	switch t &^ ResponseBit {
	case TypeSend:
		return "send"
	case TypePull:
		return "pull"
	case TypeAck:
		return "ack"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeStatus:
		return "status"
	case TypeJoin:
		return "join"
	case TypeLeave:
		return "leave"
	case TypeTransfer:
		return "transfer-leader"
	case TypeRoute:
		return "route"
	case TypeRegister:
		return "register"
	case TypeBrokerHeartbeat:
		return "broker-heartbeat"
	case TypeCluster:
		return "cluster"
	case TypeAssign:
		return "assign"
	case TypeSetWritable:
		return "set-writable"
	case TypeSubjects:
		return "subjects"
	case TypeDeregister:
		return "deregister"
	case TypeDelays:
		return "delays"
	case TypeForgetConsumerGroup:
		return "forget-consumer-group"
	case TypeMetaForgetConsumerGroup:
		return "meta-forget-consumer-group"
	case TypeNack:
		return "nack"
	case TypeExtend:
		return "extend"
	case TypeConsumerGroups:
		return "consumer-groups"
	case TypeSetConsumerGroup:
		return "set-consumer-group"
	case TypeResetConsumerGroup:
		return "reset-consumer-group"
	case TypeDeadLetters:
		return "dead-letters"
	case TypeDeadLetterOp:
		return "dead-letter-op"
	case TypeTime:
		return "time"
	case TypeHello:
		return "hello"
	case TypeApps:
		return "apps"
	case TypeAppPut:
		return "app-put"
	case TypeAppRotate:
		return "app-rotate"
	case TypeAppDelete:
		return "app-delete"
	case TypeBrokerConfig:
		return "broker-config"
	case TypeRegisterConsumer:
		return "register-consumer"
	case TypeSetBrokerConfig:
		return "set-broker-config"
	case TypeMessages:
		return "messages"
	case TypeSetVersion:
		return "set-version"
	case TypeBackup:
		return "backup"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Errors of the frame layer. After either, the connection is closed: its
// byte stream can no longer be trusted.
var (
	ErrFrameTooLarge = errors.New("transport: frame too large")
	ErrMalformed     = errors.New("transport: malformed frame")
)

// Frame is one frame.
type Frame struct {
	Type    Type
	ID      uint64
	Payload []byte
}

// WriteFrame writes f to w (buffered; the caller flushes).
func WriteFrame(w *bufio.Writer, f Frame) error {
	return writeFrameParts(w, f.Type, f.ID, f.Payload)
}

// writeFrameParts writes a frame whose payload is the parts one after the
// other, without joining them first.
func writeFrameParts(w *bufio.Writer, t Type, id uint64, parts ...[]byte) error {
	n := 1 + 8
	for _, p := range parts {
		n += len(p)
	}
	var h [frameHeader]byte
	binary.LittleEndian.PutUint32(h[:4], uint32(n))
	h[4] = byte(t)
	binary.LittleEndian.PutUint64(h[5:], id)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// FrameHeader is what precedes a frame's payload: its type, its request id
// and the payload's length.
type FrameHeader struct {
	Type       Type
	ID         uint64
	PayloadLen int
}

// ReadFrameHeader reads a frame's header, refusing a length field above
// maxFrame before anything else is read; the PayloadLen bytes of payload
// follow in r. It returns io.EOF only at a clean end between frames.
func ReadFrameHeader(r *bufio.Reader, maxFrame int) (FrameHeader, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:4]); err != nil {
		return FrameHeader{}, err // io.EOF between frames, io.ErrUnexpectedEOF inside one
	}
	n := binary.LittleEndian.Uint32(h[:4])
	if n < 9 {
		return FrameHeader{}, fmt.Errorf("%w: length %d is below the header's 9 bytes", ErrMalformed, n)
	}
	if int64(n) > int64(maxFrame) {
		return FrameHeader{}, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, maxFrame)
	}
	if _, err := io.ReadFull(r, h[4:]); err != nil {
		return FrameHeader{}, noEOF(err)
	}
	return FrameHeader{Type: Type(h[4]), ID: binary.LittleEndian.Uint64(h[5:]), PayloadLen: int(n) - 9}, nil
}

// ReadFrame reads one frame of at most maxFrame bytes (its length field),
// allocating its payload as soon as the header is read: fit for a client,
// which reads only answers to its own requests. A server takes the
// payload's memory from its budget between ReadFrameHeader and the read of
// the payload. It returns io.EOF only at a clean end between frames.
func ReadFrame(r *bufio.Reader, maxFrame int) (Frame, error) {
	h, err := ReadFrameHeader(r, maxFrame)
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Type: h.Type, ID: h.ID, Payload: make([]byte, h.PayloadLen)}
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return Frame{}, noEOF(err)
	}
	return f, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
