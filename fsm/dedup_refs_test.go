package fsm

import (
	"slices"
	"testing"
)

// Ids whose hashes collide must all stay in the window of delayed
// messages: each is a candidate until it expires, whatever order they
// expire in.
func TestRefDedupKeepsCollidingIDs(t *testing.T) {
	d := newRefDedup(100)
	const h = 42
	d.addHash(h, 10, seen{offset: 1})
	d.addHash(h, 20, seen{offset: 2})
	d.addHash(h, 30, seen{offset: 3})
	d.addHash(7, 30, seen{offset: 4})
	offsets := func() []int64 {
		var out []int64
		for _, s := range d.lookupHash(h) {
			out = append(out, s.offset)
		}
		slices.Sort(out)
		return out
	}
	if got := offsets(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("candidates %v, want 1 2 3", got)
	}
	d.expire(115) // forgets the one appended at 10
	if got := offsets(); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("after the first expiry: %v, want 2 3", got)
	}
	d.expire(125)
	if got := offsets(); !slices.Equal(got, []int64{3}) {
		t.Fatalf("after the second expiry: %v, want 3", got)
	}
	d.expire(135)
	if got := offsets(); len(got) != 0 || len(d.seen) != 0 || len(d.more) != 0 {
		t.Fatalf("after every expiry: %v, seen %v, more %v", got, d.seen, d.more)
	}
}
