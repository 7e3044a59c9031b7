package limits

import (
	"errors"
	"fmt"
)

// ErrName means a name breaks the naming rule of CheckName.
var ErrName = errors.New("limits: bad name")

// CheckName reports whether s is a valid subject, group, consumer or node
// name: 1 to MaxName bytes of letters, digits, '.', '_', '-' and ':',
// starting with a letter or digit. Subjects name directories, so nothing
// else is allowed. what names the kind of name in the error.
func CheckName(what, s string) error {
	if s == "" || len(s) > MaxName {
		return fmt.Errorf("%w: %s name length %d: %s", ErrName, what, len(s), nameRule)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-' && c != ':')) {
			at := fmt.Sprintf("byte %d", i)
			if i == 0 {
				at = "the first byte"
			}
			return fmt.Errorf("%w: %s name %q: %s, %q, is not allowed: %s", ErrName, what, s, at, c, nameRule)
		}
	}
	return nil
}

// nameRule says what CheckName allows, in its errors.
var nameRule = fmt.Sprintf("a name is 1 to %d of the letters a-z and A-Z, the digits 0-9, '.', '_', '-' and ':', "+
	"starting with a letter or a digit", MaxName)

// MetaGroup is the metaserver group's own name, which no broker group may
// take; operator requests name it to reach the metaserver group.
const MetaGroup = "meta"

// ConsumerID names one consumer of a group of a subject.
type ConsumerID struct {
	Subject, ConsumerGroup, Consumer string
}

// Check reports whether every name of id is valid (CheckName); the error
// wraps ErrName.
func (id ConsumerID) Check() error {
	if err := CheckName("subject", id.Subject); err != nil {
		return err
	}
	if err := CheckName("consumer group", id.ConsumerGroup); err != nil {
		return err
	}
	return CheckName("consumer", id.Consumer)
}

// FirstUnprintable returns the index of the first byte of s that is not
// printable ASCII other than a space ('!' to '~'), or -1 if there is
// none: the rule of a chosen message id, and of the outbox's keys, which
// every database then stores and compares byte by byte.
func FirstUnprintable(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			return i
		}
	}
	return -1
}
