package outbox

import (
	"fmt"
	"strings"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// maxKey bounds a lease owner and a consumer's scope, as a message id is
// bounded: each is a key of a table beside ids.
const maxKey = message.MaxIDLen

// checkKey refuses a lease owner or a consumer's scope (what) that is
// longer than maxKey or not made only of printable ASCII other than a
// space, as a chosen message id (limits.FirstUnprintable). Such a key is
// stored and compared byte by byte by every dialect; others are not:
// MySQL's collations ignore trailing spaces ("a" and "a " would be one
// owner, one scope) and its INSERT IGNORE stores invalid UTF-8 as '?', and
// PostgreSQL refuses invalid UTF-8 and NUL bytes in text at each insert.
func checkKey(what, s string) error {
	if len(s) > maxKey || limits.FirstUnprintable(s) >= 0 {
		return fmt.Errorf("%w: %s %.40q: at most %d bytes of printable ASCII other than a space", ErrConfig, what, s, maxKey)
	}
	return nil
}

// asKey replaces each character of s that checkKey refuses with '_'.
func asKey(s string) string {
	return strings.Map(func(r rune) rune {
		if r < '!' || r > '~' {
			return '_'
		}
		return r
	}, s)
}
