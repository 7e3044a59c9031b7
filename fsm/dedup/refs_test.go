package dedup

import (
	"slices"
	"testing"
)

// Ids whose hashes collide must all stay in the window of delayed
// messages: each is a candidate until it expires, whatever order they
// expire in.
func TestRefDedupKeepsCollidingIDs(t *testing.T) {
	d := NewRefs(100)
	const h = 42
	d.AddHash(h, 10, Seen{Offset: 1})
	d.AddHash(h, 20, Seen{Offset: 2})
	d.AddHash(h, 30, Seen{Offset: 3})
	d.AddHash(7, 30, Seen{Offset: 4})
	offsets := func() []int64 {
		var out []int64
		for _, s := range d.LookupHash(h) {
			out = append(out, s.Offset)
		}
		slices.Sort(out)
		return out
	}
	if got := offsets(); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("candidates %v, want 1 2 3", got)
	}
	d.Expire(115) // forgets the one appended at 10
	if got := offsets(); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("after the first expiry: %v, want 2 3", got)
	}
	d.Expire(125)
	if got := offsets(); !slices.Equal(got, []int64{3}) {
		t.Fatalf("after the second expiry: %v, want 3", got)
	}
	d.Expire(135)
	if got := offsets(); len(got) != 0 || len(d.seen) != 0 || len(d.more) != 0 {
		t.Fatalf("after every expiry: %v, seen %v, more %v", got, d.seen, d.more)
	}
}
