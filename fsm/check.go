package fsm

import (
	"errors"
	"fmt"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// ErrInvalid means a command names something badly or asks for something
// impossible; the command changes nothing.
var ErrInvalid = errors.New("fsm: invalid request")

// ErrStaleConsumer means an ack names a registration of its consumer that
// is gone: the consumer's session expired, its unacked entries went back
// to its group, and it was forgotten (it may have registered afresh since,
// with a new epoch). The ack changes nothing; the entries it names are
// delivered again, to whichever consumer of the group pulls them. It wraps
// ErrInvalid.
var ErrStaleConsumer = fmt.Errorf("%w: stale consumer", ErrInvalid)

// ErrLimit means a command would take the state past one of the limits of
// package limits (subjects, consumer groups, consumers); it wraps
// ErrInvalid and changes nothing.
var ErrLimit = fmt.Errorf("%w: limit reached", ErrInvalid)

// CheckName reports whether s is a valid subject, group, consumer or node
// name (limits.CheckName), as an error wrapping ErrInvalid.
func CheckName(what, s string) error {
	if err := limits.CheckName(what, s); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func checkNames(subject, group, consumer string) error {
	if err := checkGroupNames(subject, group); err != nil {
		return err
	}
	return CheckName("consumer", consumer)
}

// checkGroupNames checks the names of a consumer group's command.
func checkGroupNames(subject, group string) error {
	if err := CheckName("subject", subject); err != nil {
		return err
	}
	return CheckName("consumer group", group)
}

// errTooFar refuses a delivery time the schedule's references cannot name.
var errTooFar = fmt.Errorf("%w: delivery time beyond the year 2089", ErrInvalid)

// CheckMessage reports whether an Append may carry m: a valid subject
// name, every message limit (message.Message.Check, the encoded size among
// them), and for a delayed message a delivery time the schedule can name.
// The leader checks each message with it before proposing, and apply
// checks again, so that what apply would refuse is never proposed, and
// what a leader proposes anyway is refused alike on every replica.
func CheckMessage(m *message.Message) error {
	if err := CheckName("subject", m.Subject); err != nil {
		return err
	}
	if err := m.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if m.DeliverAt > 0 && !delaywheel.ValidHour(delaywheel.Hour(m.DeliverAt)) {
		return errTooFar
	}
	return nil
}
