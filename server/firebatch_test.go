package server

import (
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
)

// A Fire holds at most limits.MaxFireRefs references whose records come to
// at most limits.MaxFireBytes, and always at least one (a record larger
// than the bound goes alone), so a replica can bound the space a Fire
// needs before it applies it.
func TestFireBatchBounds(t *testing.T) {
	entries := func(n int, size int32) []delaywheel.Entry {
		out := make([]delaywheel.Entry, n)
		for i := range out {
			out[i].Size = size
		}
		return out
	}
	for _, tc := range []struct {
		name string
		due  []delaywheel.Entry
		want int
	}{
		{"small records: the count bounds", entries(limits.MaxFireRefs+5, 100), limits.MaxFireRefs},
		{"exactly the bytes", entries(10, limits.MaxFireBytes/4), 4},
		{"one byte over", entries(10, limits.MaxFireBytes/4+1), 3},
		{"a record over the bound goes alone", entries(3, limits.MaxFireBytes+1), 1},
		{"one entry", entries(1, 10), 1},
	} {
		if got := fireBatch(tc.due); got != tc.want {
			t.Errorf("%s: %d in one Fire, want %d", tc.name, got, tc.want)
		}
	}
}
