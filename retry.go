package qmq

import (
	"fmt"
	"time"
)

// RetryError says when a message whose handler failed is to come again
// (QMQ's NeedRetryException). A Handler returns one (RetryAfter, RetryAt),
// or an error that wraps one, to choose the time; any other error brings
// the message back after its group's backoff for how many times it was
// delivered. Puller.Nack takes one for the same choice. The message comes
// again no earlier than the time chosen, to this consumer group (maybe to
// another of its consumers), unless it was delivered the group's most
// times: then it becomes a dead letter.
type RetryError struct {
	// At is when the message comes again; with After it is counted from
	// the nack. A time not after the nack (or the zero time with After not
	// positive) brings it back at once.
	At    time.Time
	After time.Duration
	// Err is why, if the handler says; Unwrap returns it.
	Err error
}

// RetryAfter returns a RetryError that brings the message back d after
// the handler returns it (at once if d is not positive).
func RetryAfter(d time.Duration) *RetryError { return &RetryError{After: d} }

// RetryAt returns a RetryError that brings the message back at t (at once
// if t is past).
func RetryAt(t time.Time) *RetryError { return &RetryError{At: t} }

func (e *RetryError) Error() string {
	when := "at once"
	switch {
	case !e.At.IsZero():
		when = "at " + e.At.Format(time.RFC3339Nano)
	case e.After > 0:
		when = "after " + e.After.String()
	}
	if e.Err != nil {
		return fmt.Sprintf("qmq: retry %s: %v", when, e.Err)
	}
	return "qmq: retry " + when
}

// Unwrap returns the error the RetryError carries.
func (e *RetryError) Unwrap() error { return e.Err }

// retryAt returns the time a nack at now asks for: at least 1 ms after the
// epoch (0 on the wire means the group's backoff) and rounded up to the
// millisecond the wire carries, so that the message never comes early. A
// nil e asks for the group's backoff: the zero time.
func (e *RetryError) retryAt(now time.Time) time.Time {
	if e == nil {
		return time.Time{}
	}
	at := e.At
	if at.IsZero() {
		at = now.Add(max(e.After, 0))
	}
	if t := at.Truncate(time.Millisecond); t.Before(at) {
		at = t.Add(time.Millisecond)
	}
	if at.UnixMilli() < 1 {
		at = time.UnixMilli(1)
	}
	return at
}
