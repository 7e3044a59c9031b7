package meta

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/qmqgo/qmq/internal/auth"
)

// ErrInvalid means a command names something badly or asks for something
// impossible; the command changes nothing.
var ErrInvalid = errors.New("meta: invalid request")

// Op is a command's type byte. The values are stored in Raft logs: never
// renumber them.
type Op byte

// Commands.
const (
	OpRegister       Op = 1  // a broker node's addresses
	OpDeregister     Op = 2  // forget a broker node
	OpAssign         Op = 3  // add broker groups to a subject's route
	OpSetWritable    Op = 4  // drain a group or open it again
	OpConsumer       Op = 5  // a consumer group of a subject
	OpMember         Op = 6  // a metaserver node's client address
	OpForgetConsumer Op = 7  // forget a consumer group of a subject
	OpPutApp         Op = 8  // create an application, or change its rights
	OpRotateApp      Op = 9  // give an application a new secret
	OpDeleteApp      Op = 10 // forget an application
	OpSetVersion     Op = 11 // raise the group's active version Number
)

// errUnknownOp is a command of an op this build does not know: one a
// leader of a newer release proposed (see SetVersion).
var errUnknownOp = fmt.Errorf("%w: unknown command", ErrInvalid)

// Register records a broker node (and creates its group on first sight).
type Register struct {
	BrokerGroup string `json:"group"`
	ID          string `json:"id"`
	RaftAddr    string `json:"raft_addr"`
	ClientAddr  string `json:"client_addr"`
	HTTPAddr    string `json:"http_addr,omitempty"`
}

// Deregister forgets a broker node. A group with no nodes and no subjects
// is forgotten with it.
type Deregister struct {
	BrokerGroup string `json:"group"`
	ID          string `json:"id"`
}

// Assign adds broker groups to a subject's route, creating the route.
// Groups already in it are ignored; a route never loses a group. With
// IfNew it only creates: a subject that has a route keeps it as it is (a
// new leader deciding a first use on stale state adds nothing). App is the
// application on whose behalf a route is created: a known application's
// new route counts towards its subject limit and is recorded as its.
type Assign struct {
	Subject      string   `json:"subject"`
	BrokerGroups []string `json:"groups"`
	IfNew        bool     `json:"if_new,omitempty"`
	App          string   `json:"app,omitempty"`
}

// SetWritable drains a group (false) or opens it again (true).
type SetWritable struct {
	BrokerGroup string `json:"group"`
	Writable    bool   `json:"writable"`
}

// Consumer records a consumer group of a subject. App is the application
// whose consumer asked: a known application's new consumer group counts
// towards its group limit and is recorded as its. Broker, if it names a
// broker group of the subject's route, is that broker group recording the
// group for a pull about to create it there: the record is provisional,
// held by the broker groups that recorded it, and goes once every one of
// them has forgotten the group by itself (ForgetConsumer with Broker). A
// record without Broker (a consumer asking for its route, an operator) is
// declared: only an operator's ForgetConsumer removes it.
type Consumer struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"group"`
	App           string `json:"app,omitempty"`
	Broker        string `json:"broker,omitempty"`
}

// ForgetConsumer forgets a consumer group of a subject, making room under
// MaxConsumerGroupsPerSubject and MaxTotalConsumerGroups. Only the metaserver's
// record goes: the broker groups keep the group's consumption state, and
// a consumer of the group asking for the route records it again. A group
// not recorded is a no-op, so a retry succeeds. With Broker it is that
// broker group saying it forgot the group by itself (an idle broadcast
// group, a group whose last consumer went before the subject had a
// message): a provisional record stops being held by it, and goes when no
// broker group holds it; a declared one stays.
type ForgetConsumer struct {
	Subject       string `json:"subject"`
	ConsumerGroup string `json:"group"`
	Broker        string `json:"broker,omitempty"`
}

// Member records a metaserver node's client address, so that every node
// can point clients at the leader; an empty address forgets the node.
type Member struct {
	ID         string `json:"id"`
	ClientAddr string `json:"client_addr,omitempty"`
}

// PutApp creates an application (Create) or changes an existing one's
// rights, admin flag and limits. A creation carries the whole record with
// its one secret, which the metaserver leader generated: only the secret's
// salt and hash are in the command. An update carries no secrets (it is
// refused with any): the stored ones are kept. Creating a code that exists,
// or updating one that does not, is refused, so two operators racing to
// create one application do not overwrite each other's secret.
type PutApp struct {
	App    auth.App `json:"app"`
	Create bool     `json:"create,omitempty"`
}

// RotateApp gives an application a new current secret (its salt and hash,
// generated by the leader). The secret it replaces is kept, expiring at
// OldExpires (Unix milliseconds), or dropped when OldExpires is 0; a secret
// before that one is dropped.
type RotateApp struct {
	Code       string      `json:"code"`
	Secret     auth.Secret `json:"secret"`
	OldExpires int64       `json:"old_expires,omitempty"`
}

// DeleteApp forgets an application: its secrets stop working at once. The
// routes and consumer groups it created stay; with Release they are
// recorded as nobody's from then on, so a new application of the same
// code starts with nothing (a deletion written before Release existed kept
// them recorded as the application's, and is replayed so). Deleting an
// unknown application is a no-op, so a retry succeeds.
type DeleteApp struct {
	Code    string `json:"code"`
	Release bool   `json:"release,omitempty"`
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
	case *PutApp:
		op = OpPutApp
	case *RotateApp:
		op = OpRotateApp
	case *DeleteApp:
		op = OpDeleteApp
	case *SetVersion:
		op = OpSetVersion
	default:
		panic(fmt.Sprintf("meta: encode %T", cmd))
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		panic(err) // plain structs of strings, numbers and bools always marshal
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
	case OpPutApp:
		cmd = &PutApp{}
	case OpRotateApp:
		cmd = &RotateApp{}
	case OpDeleteApp:
		cmd = &DeleteApp{}
	case OpSetVersion:
		cmd = &SetVersion{}
	default:
		return nil, fmt.Errorf("%w %d", errUnknownOp, b[0])
	}
	if err := json.Unmarshal(b[1:], cmd); err != nil {
		return nil, fmt.Errorf("%w: command %d: %v", ErrInvalid, b[0], err)
	}
	if err := cmd.check(); err != nil {
		return nil, err
	}
	return cmd, nil
}
