package transport

import (
	"errors"
	"fmt"
	"strings"
)

// Code is a wire error code. The values are part of the protocol: never
// renumber them.
type Code uint8

// Error codes, with whether a retry of the same request can succeed.
const (
	OK          Code = 0
	NotLeader   Code = 1 // retriable: the error carries the leader's client address, if known
	Invalid     Code = 2 // the request is malformed or names something badly
	TooLarge    Code = 3 // a frame or message exceeds a limit
	Unavailable Code = 4 // retriable: no leader, shutting down, or a dependency is down
	Timeout     Code = 5 // retriable: the deadline passed; the outcome is unknown
	Internal    Code = 6 // a bug or a storage failure on the server
	UnknownType Code = 7 // the server does not know the request type
	ReadOnly    Code = 8 // the broker group is drained: send to another group of the subject
	// StaleConsumer: an ack names a registration of its consumer that has
	// ended (its session expired and its messages went back to the group).
	// Retrying cannot help: drop the ack; the messages come again.
	StaleConsumer Code = 9
	// TooManyConnections is retriable: the server refused the connection
	// (too many from this address, or in all) and closed it; a later
	// connection can succeed.
	TooManyConnections Code = 10
	// DiskFull: the broker's data disk is short of space, so it refuses
	// sends (consumers are still served) until space is freed. Not
	// retriable at once, here: send to another group of the subject, or
	// here again later (the SDK's producer does both).
	DiskFull Code = 11
	// Unauthenticated: the node checks applications and the request's
	// connection has not proved one (no Hello, an unknown application, a
	// wrong or expired secret, or one deleted or rotated since). Not
	// retriable: fix the credentials.
	Unauthenticated Code = 12
	// PermissionDenied: the application may not do what it asked; the
	// message names the application and what was refused.
	PermissionDenied Code = 13
	// ResourceExhausted: the node is at a bound of what it holds for
	// clients (as many backups open as it allows). Not retried by the
	// clients: the message says when to try again.
	ResourceExhausted Code = 14
	// Unsupported: the node's release does not support what was asked
	// (a request, or a field of one, of a newer version than the node's
	// build supports; see HelloResponse). A client finds it before it
	// sends, from the versions the node advertises; the message names
	// the node, its versions and what needs more. Not retriable: upgrade
	// the node.
	Unsupported Code = 15
)

var codeInfo = map[Code]struct {
	name      string
	retriable bool
}{
	OK:                 {"OK", false},
	NotLeader:          {"NOT_LEADER", true},
	Invalid:            {"INVALID", false},
	TooLarge:           {"TOO_LARGE", false},
	Unavailable:        {"UNAVAILABLE", true},
	Timeout:            {"TIMEOUT", true},
	Internal:           {"INTERNAL", false},
	UnknownType:        {"UNKNOWN_TYPE", false},
	ReadOnly:           {"READONLY", false},
	StaleConsumer:      {"STALE_CONSUMER", false},
	TooManyConnections: {"TOO_MANY_CONNECTIONS", true},
	DiskFull:           {"DISK_FULL", false},
	Unauthenticated:    {"UNAUTHENTICATED", false},
	PermissionDenied:   {"PERMISSION_DENIED", false},
	ResourceExhausted:  {"RESOURCE_EXHAUSTED", false},
	Unsupported:        {"UNSUPPORTED", false},
}

func (c Code) String() string {
	if i, ok := codeInfo[c]; ok {
		return i.name
	}
	return fmt.Sprintf("CODE_%d", uint8(c))
}

// Retriable reports whether a retry of the same request can succeed.
func (c Code) Retriable() bool { return codeInfo[c].retriable }

// Error is an error answered by a server.
type Error struct {
	Code    Code
	Message string
	Leader  string // the leader's client address, for NotLeader
}

func (e *Error) Error() string {
	s := fmt.Sprintf("qmq: %s: %s", e.Code, e.Message)
	if e.Leader != "" {
		s += " (leader " + e.Leader + ")"
	}
	return s
}

// Retriable reports whether a retry of the same request can succeed.
func (e *Error) Retriable() bool { return e.Code.Retriable() }

// Is makes errors.Is(err, &Error{Code: c}) match any Error with code c.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Message == "" && t.Leader == ""
}

// CodeOf returns err's wire code: its own if it is (or wraps) an *Error,
// else Internal (or OK for nil).
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// RejectionText is how one message's rejection (SendResult.Error) carries
// err: for an *Error, its code's name, a colon and its message
// ("PERMISSION_DENIED: application billing may not send to subject
// payments"), which ParseRejection reads back; otherwise err's text.
func RejectionText(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code.String() + ": " + e.Message
	}
	return err.Error()
}

// ParseRejection returns the *Error a rejection's text names with its
// code (RejectionText), or nil when the text names none.
func ParseRejection(text string) *Error {
	name, msg, ok := strings.Cut(text, ": ")
	if !ok {
		return nil
	}
	for c, i := range codeInfo {
		if c != OK && i.name == name {
			return &Error{Code: c, Message: msg}
		}
	}
	return nil
}
