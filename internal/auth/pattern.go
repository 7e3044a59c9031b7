package auth

import (
	"fmt"
	"strings"

	"github.com/qmqgo/qmq/internal/limits"
)

// A pattern names subjects or consumer groups: a name (that one only), a
// name's beginning followed by '*' (every name starting so: "orders.*"
// matches "orders.paid"), or "*" alone (every name). Names never contain
// '*', so a pattern is never ambiguous.
const wildcard = "*"

// CheckPattern reports whether p is a valid pattern; what names its kind
// in the error ("subject", "group").
func CheckPattern(what, p string) error {
	if p == wildcard {
		return nil
	}
	if prefix, ok := strings.CutSuffix(p, wildcard); ok {
		// A prefix follows the naming rule as far as it goes.
		if err := limits.CheckName(what+" pattern", prefix); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return nil
	}
	if err := limits.CheckName(what+" pattern", p); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// matcher matches names against a set of patterns: exact names by a map
// lookup, prefixes one by one (an application has at most MaxRules).
type matcher struct {
	all      bool
	exact    map[string]bool
	prefixes []string
}

func (m *matcher) add(p string) {
	switch {
	case p == wildcard:
		m.all = true
	case strings.HasSuffix(p, wildcard):
		m.prefixes = append(m.prefixes, strings.TrimSuffix(p, wildcard))
	default:
		if m.exact == nil {
			m.exact = map[string]bool{}
		}
		m.exact[p] = true
	}
}

func (m *matcher) match(name string) bool {
	if m.all || m.exact[name] {
		return true
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
