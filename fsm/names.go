package fsm

import (
	"errors"
	"fmt"
)

// ErrInvalid means a command names something badly or asks for something
// impossible; the command changes nothing.
var ErrInvalid = errors.New("fsm: invalid request")

// CheckName reports whether s is a valid subject, group or consumer name:
// 1 to MaxNameLen bytes of letters, digits, '.', '_', '-' and ':', starting
// with a letter or digit. Subjects name directories, so nothing else is
// allowed.
func CheckName(what, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("%w: %s name length %d (1..%d)", ErrInvalid, what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-' && c != ':')) {
			return fmt.Errorf("%w: %s name %q: byte %d (%q) not allowed", ErrInvalid, what, s, i, c)
		}
	}
	return nil
}

func checkNames(subject, group, consumer string) error {
	if err := CheckName("subject", subject); err != nil {
		return err
	}
	if err := CheckName("group", group); err != nil {
		return err
	}
	return CheckName("consumer", consumer)
}
