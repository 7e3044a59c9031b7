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
		return fmt.Errorf("%w: %s name length %d (1..%d)", ErrName, what, len(s), MaxName)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != '-' && c != ':')) {
			return fmt.Errorf("%w: %s name %q: byte %d (%q) not allowed", ErrName, what, s, i, c)
		}
	}
	return nil
}
