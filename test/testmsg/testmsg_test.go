package testmsg

import (
	"testing"

	"github.com/qmqgo/qmq/internal/limits"
)

func TestOfSize(t *testing.T) {
	for _, n := range []int{100, 1000, 70000, 1 << 20, limits.MaxMessage - 1, limits.MaxMessage, limits.MaxMessage + 1, limits.MaxFrame} {
		for _, at := range []int64{0, 1_800_000_000_000} {
			if got := OfSize("id", "s", at, n).EncodedSize(); got != n {
				t.Errorf("OfSize(%d, deliverAt %d) encodes to %d bytes", n, at, got)
			}
		}
	}
}
