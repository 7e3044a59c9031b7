package admin

import "errors"

// The admin's own errors; match them with errors.Is. Otherwise a Client
// returns the SDK's (qmq.ErrInvalidName, qmq.ErrUnreachable,
// qmq.ErrUnauthenticated, qmq.ErrPermissionDenied, ...), with which
// every error of their cause matches, found by the Client or answered by
// a node.
var (
	// ErrNoConsumerGroup means no broker group of the subject knows the
	// consumer group.
	ErrNoConsumerGroup = errors.New("qmq: consumer group not known")

	// ErrNoDeadLetter means the broker group keeps no dead letter of that
	// sequence for the consumer group.
	ErrNoDeadLetter = errors.New("qmq: no such dead letter")

	// ErrNotInRoute means a broker group named is not one of the subject's.
	ErrNotInRoute = errors.New("qmq: broker group not in the subject's route")

	// ErrBadQuery means a message query is not one the broker groups can
	// answer (a window that ends before it starts, a limit past its bound,
	// a sequence without its broker group): the error says which.
	ErrBadQuery = errors.New("qmq: bad message query")
)

// queryError is an ErrBadQuery with its own text.
type queryError struct{ text string }

func (e *queryError) Error() string        { return e.text }
func (e *queryError) Is(target error) bool { return target == ErrBadQuery }
