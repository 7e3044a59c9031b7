package outbox

import "strings"

// maxKey bounds a lease owner and a consumer's scope, as a message id is
// bounded: each is a key of a table beside ids.
const maxKey = 128

// validKey reports whether s is made only of printable ASCII other than a
// space ('!' to '~'), as a message id is. Such a key is stored and
// compared byte by byte by every dialect; others are not: MySQL's
// collations ignore trailing spaces ("a" and "a " would be one owner, one
// scope) and its INSERT IGNORE stores invalid UTF-8 as '?', and
// PostgreSQL refuses invalid UTF-8 and NUL bytes in text at each insert.
func validKey(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// asKey replaces each byte of s that validKey refuses with '_'.
func asKey(s string) string {
	return strings.Map(func(r rune) rune {
		if r < '!' || r > '~' {
			return '_'
		}
		return r
	}, s)
}
