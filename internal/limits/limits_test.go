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
