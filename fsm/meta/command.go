package meta

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrInvalid means a command names something badly or asks for something
// impossible; the command changes nothing.
var ErrInvalid = errors.New("meta: invalid request")

// Op is a command's type byte. The values are stored in Raft logs: never
// renumber them.
type Op byte

// Commands.
const (
	OpRegister       Op = 1 // a broker node's addresses
	OpDeregister     Op = 2 // forget a broker node
	OpAssign         Op = 3 // add broker groups to a subject's route
	OpSetWritable    Op = 4 // drain a group or open it again
	OpConsumer       Op = 5 // a consumer group of a subject
	OpMember         Op = 6 // a metaserver node's client address
	OpForgetConsumer Op = 7 // forget a consumer group of a subject
)

// Register records a broker node (and creates its group on first sight).
type Register struct {
	Group      string `json:"group"`
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ClientAddr string `json:"client_addr"`
	HTTPAddr   string `json:"http_addr,omitempty"`
}

// Deregister forgets a broker node. A group with no nodes and no subjects
// is forgotten with it.
type Deregister struct {
	Group string `json:"group"`
	ID    string `json:"id"`
}

// Assign adds broker groups to a subject's route, creating the route.
// Groups already in it are ignored; a route never loses a group. With
// IfNew it only creates: a subject that has a route keeps it as it is (a
// new leader deciding a first use on stale state adds nothing).
type Assign struct {
	Subject string   `json:"subject"`
	Groups  []string `json:"groups"`
	IfNew   bool     `json:"if_new,omitempty"`
}

// SetWritable drains a group (false) or opens it again (true).
type SetWritable struct {
	Group    string `json:"group"`
	Writable bool   `json:"writable"`
}

// Consumer records a consumer group of a subject.
type Consumer struct {
	Subject string `json:"subject"`
	Group   string `json:"group"`
}

// ForgetConsumer forgets a consumer group of a subject, making room under
// MaxConsumerGroups and MaxTotalConsumerGroups. Only the metaserver's
// record goes: the broker groups keep the group's consumption state, and
// a consumer of the group asking for the route records it again. A group
// not recorded is a no-op, so a retry succeeds.
type ForgetConsumer struct {
	Subject string `json:"subject"`
	Group   string `json:"group"`
}

// Member records a metaserver node's client address, so that every node
// can point clients at the leader; an empty address forgets the node.
type Member struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr,omitempty"`
}

// Encode returns the command as a Raft log entry: its op byte, then JSON.
func Encode(cmd Command) []byte {
	var op Op
	switch cmd.(type) {
	case *Register:
		op = OpRegister
	case *Deregister:
		op = OpDeregister
	case *Assign:
		op = OpAssign
	case *SetWritable:
		op = OpSetWritable
	case *Consumer:
		op = OpConsumer
	case *Member:
		op = OpMember
	case *ForgetConsumer:
		op = OpForgetConsumer
	default:
		panic(fmt.Sprintf("meta: encode %T", cmd))
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		panic(err) // plain structs of strings and bools always marshal
	}
	return append([]byte{byte(op)}, b...)
}

// Command is any of the commands above.
type Command interface{ check() error }

// Check reports whether a command is well formed: every name and address
// in it valid. Apply checks again; FSM.Check checks this and the state's
// limits.
func Check(cmd Command) error { return cmd.check() }

// Decode parses a Raft log entry into its command, checking every name and
// address in it.
func Decode(b []byte) (Command, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty command", ErrInvalid)
	}
	var cmd Command
	switch Op(b[0]) {
	case OpRegister:
		cmd = &Register{}
	case OpDeregister:
		cmd = &Deregister{}
	case OpAssign:
		cmd = &Assign{}
	case OpSetWritable:
		cmd = &SetWritable{}
	case OpConsumer:
		cmd = &Consumer{}
	case OpMember:
		cmd = &Member{}
	case OpForgetConsumer:
		cmd = &ForgetConsumer{}
	default:
		return nil, fmt.Errorf("%w: unknown command %d", ErrInvalid, b[0])
	}
	if err := json.Unmarshal(b[1:], cmd); err != nil {
		return nil, fmt.Errorf("%w: command %d: %v", ErrInvalid, b[0], err)
	}
	if err := cmd.check(); err != nil {
		return nil, err
	}
	return cmd, nil
}
