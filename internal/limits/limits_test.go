package limits

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"orders", true}, {"a", true}, {"Orders.EU_2:x-y", true}, {"9lives", true},
		{strings.Repeat("x", MaxName), true}, {strings.Repeat("x", MaxName+1), false},
		{"", false}, {".hidden", false}, {"-x", false}, {"a/b", false}, {"a b", false}, {"..", false}, {"é", false},
	} {
		err := CheckName("subject", tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrName)) {
			t.Errorf("CheckName(%.20q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestConsumerIDCheck(t *testing.T) {
	long := strings.Repeat("x", MaxName)
	for _, tc := range []struct {
		id ConsumerID
		ok bool
	}{
		{ConsumerID{"orders", "billing", "c-1"}, true},
		{ConsumerID{long, long, long}, true},
		{ConsumerID{long + "x", "g", "c"}, false},
		{ConsumerID{"s", long + "x", "c"}, false},
		{ConsumerID{"s", "g", long + "x"}, false},
		{ConsumerID{"", "g", "c"}, false},
		{ConsumerID{"s", "", "c"}, false},
		{ConsumerID{"s", "g", ""}, false},
		{ConsumerID{"s", "g", "a b"}, false},
	} {
		err := tc.id.Check()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrName)) {
			t.Errorf("%+.20v.Check() = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
}

// The printable range ends at '!' and '~': a space, DEL and bytes past
// ASCII are refused, wherever they stand.
func TestFirstUnprintable(t *testing.T) {
	for s, want := range map[string]int{"": -1, "!~": -1, "a b": 1, " a": 0, "a\x7f": 1, "a\x80": 1, "é": 0, "ab\x00": 2} {
		if got := FirstUnprintable(s); got != want {
			t.Errorf("FirstUnprintable(%q) = %d, want %d", s, got, want)
		}
	}
}
