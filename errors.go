package qmq

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/transport"
)

// The SDK's errors. Match them with errors.Is: an error the SDK returns
// for one of these causes wraps its sentinel, whether the SDK found the
// cause before sending or a server answered it. The error's text says
// more (what was refused, and where); a server's answer is also an
// *Error, whose code says whether a retry can help.

// Error is an error answered by a server, with its wire code; see
// transport.Code for the codes and which are retriable.
type Error = transport.Error

// Errors of connecting.
var (
	// ErrUnreachable means a client that has never reached any node at
	// the addresses it was given gave up after about two seconds: the
	// address is wrong, or no qmqd runs there ("qmq: cannot reach
	// 127.0.0.1:6999: connection refused: is qmqd running?"). A client
	// that has reached a node once rides out any outage until its context
	// ends, and so do its connections to the broker groups a route names.
	ErrUnreachable = errors.New("qmq: cannot reach any node")

	// ErrUnauthenticated means a cluster that checks applications refused
	// the client: no application was named, or an unknown one, a wrong or
	// expired secret, or one rotated out since the connection was made.
	// It is not retried: the credentials must change first (WithApp).
	ErrUnauthenticated error = &transport.Error{Code: transport.Unauthenticated}

	// ErrPermissionDenied means the application may not do what it asked;
	// the error names what. It is not retried: the application's rights
	// must change first.
	ErrPermissionDenied error = &transport.Error{Code: transport.PermissionDenied}

	// ErrUnsupported means the node asked runs a release that does not
	// support what was asked (a message's timeline, say, from a node of
	// the release before it): the error names the node, the versions it
	// supports and what needs more. The request was not sent; upgrade
	// the node.
	ErrUnsupported error = &transport.Error{Code: transport.Unsupported}
)

// Errors of sending.
var (
	// ErrClosed is returned by a send on a closed Producer.
	ErrClosed = errors.New("qmq: closed")

	// ErrInvalidName means a subject's (or a group's, a consumer's) name
	// breaks the naming rule: 1 to MaxNameLen (200) bytes of letters,
	// digits, '.', '_', '-' and ':', starting with a letter or a digit.
	ErrInvalidName = errors.New("qmq: invalid name")

	// ErrInvalidID means an id given to SetID breaks the id rules: 1 to
	// MaxIDLen (128) bytes of printable ASCII other than a space.
	ErrInvalidID = errors.New("qmq: invalid message id")

	// ErrInvalidMessage means a message breaks a limit of its fields (its
	// tags, properties or body), or an encoding given to
	// Message.UnmarshalBinary is not one of a message to send.
	ErrInvalidMessage = errors.New("qmq: invalid message")

	// ErrMessageTooLarge means a message is over MaxMessageSize, or one of
	// its fields over its own limit. It wraps ErrInvalidMessage.
	ErrMessageTooLarge = fmt.Errorf("%w: too large", ErrInvalidMessage)

	// ErrDelayTooLong means a message's delivery time is further ahead
	// than the maximum delay. The send is refused; the time is never
	// clamped.
	ErrDelayTooLong = errors.New("qmq: delivery time beyond the maximum delay")
)

// Errors of consuming.
var (
	// ErrInvalidOption means a consumer option is out of its bounds: too
	// many tags, a tag too long, a broadcast group name too long, an idle
	// expiry out of range. NewPuller and Subscribe refuse it with an error
	// wrapping this one.
	ErrInvalidOption = errors.New("qmq: invalid consumer option")

	// ErrStaleAck means an acknowledgement (or a nack, or an extension)
	// came too late: the consumer's session expired before it, so the
	// broker gave the messages back to the consumer group (they are
	// delivered again, maybe to another consumer) and refused it.
	ErrStaleAck = errors.New("qmq: ack refused: the consumer's session expired and its messages went back to the group")
)

// Package admin returns the same sentinels: it reads them through
// sdk.Error.
func init() { sdk.Error = sdkError }

// sdkError returns err so that errors.Is(err, s) holds for the SDK's
// sentinel s of each of its causes, where the cause was found by an
// internal package (a name, a message over a limit, no node reached) or
// answered by a server, whose answer is a code and a text quoting the
// error the server's own check returned. err's text, and everything it
// wraps (an *Error among them), stay as they are. Every error the SDK's
// exported functions return passes through it.
func sdkError(err error) error {
	if err == nil {
		return nil
	}
	var causes []error
	add := func(c error) {
		if !errors.Is(err, c) && !slices.Contains(causes, c) {
			causes = append(causes, c)
		}
	}
	switch {
	case errors.Is(err, message.ErrTooLarge):
		add(ErrMessageTooLarge)
	case errors.Is(err, message.ErrInvalid):
		add(ErrInvalidMessage)
	}
	if errors.Is(err, limits.ErrName) {
		add(ErrInvalidName)
	}
	if errors.Is(err, transport.ErrUnreachable) {
		add(ErrUnreachable)
	}
	eachAnswer(err, func(e *transport.Error) {
		if e.Code == transport.Invalid || e.Code == transport.TooLarge {
			for _, c := range quoted(e.Message) {
				add(c)
			}
		}
	})
	return withCauses(err, causes...)
}

// quoted returns the sentinels of the causes a server's text names: it
// quotes the error of the check that refused the request (the naming
// rule's, or a message's limits), whose text is that of the internal
// package's sentinel.
func quoted(text string) []error {
	var out []error
	switch {
	case strings.Contains(text, message.ErrTooLarge.Error()):
		out = append(out, ErrMessageTooLarge)
	case strings.Contains(text, message.ErrInvalid.Error()):
		out = append(out, ErrInvalidMessage)
	}
	if strings.Contains(text, limits.ErrName.Error()) {
		out = append(out, ErrInvalidName)
	}
	return out
}

// eachAnswer calls f with every server answer (*Error) err holds: one
// wrapped, or several joined (an admin.Client asks every broker group).
func eachAnswer(err error, f func(*transport.Error)) {
	switch e := err.(type) {
	case nil:
	case *transport.Error:
		f(e)
	case interface{ Unwrap() []error }:
		for _, w := range e.Unwrap() {
			eachAnswer(w, f)
		}
	case interface{ Unwrap() error }:
		eachAnswer(e.Unwrap(), f)
	}
}

// withCauses returns err, matching causes too (errors.Is), with err's
// text.
func withCauses(err error, causes ...error) error {
	if err == nil || len(causes) == 0 {
		return err
	}
	return &causeError{err: err, causes: causes}
}

// causeError is an error that also matches the SDK's sentinels of its
// causes.
type causeError struct {
	err    error
	causes []error
}

func (e *causeError) Error() string { return e.err.Error() }

func (e *causeError) Unwrap() []error { return append([]error{e.err}, e.causes...) }
