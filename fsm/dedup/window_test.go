package dedup

import (
	"slices"
	"testing"
)

// unmixHash inverts mixHash, so a test can choose the mixed hash (the
// fingerprint and the start slot) of the id hash it adds.
func unmixHash(m uint64) uint64 {
	inverse := func(c uint64) uint64 { // of an odd c, modulo 2^64 (Newton)
		x := c
		for range 6 {
			x *= 2 - c*x
		}
		return x
	}
	m ^= m >> 33
	m *= inverse(0xc4ceb9fe1a85ec53)
	m ^= m >> 33
	m *= inverse(0xff51afd7ed558ccd)
	m ^= m >> 33
	return m
}

func sorted(offsets []int64) []int64 { return slices.Sorted(slices.Values(offsets)) }

func TestUnmixHashInvertsMixHash(t *testing.T) {
	for _, h := range []uint64{0, 1, 42, 1 << 63, 0xdeadbeefcafef00d, ^uint64(0)} {
		if got := unmixHash(mixHash(h)); got != h {
			t.Fatalf("unmix(mix(%#x)) = %#x", h, got)
		}
	}
}

// Ids whose 64-bit hashes are equal must all stay in the window: each is a
// candidate until its bucket expires.
func TestDedupKeepsFullHashCollisions(t *testing.T) {
	d := NewWindow(10 * bucketsPerWindow) // buckets of 10 ms
	const h = 42
	d.AddHash(h, 10, 1)
	d.AddHash(h, 20, 2)
	d.AddHash(h, 29, 3)
	d.AddHash(7, 30, 4)
	if got := sorted(d.LookupHash(h)); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("candidates %v, want 1 2 3", got)
	}
	d.Expire(10*bucketsPerWindow + 19) // the bucket [10, 20) is still within the window
	if got := sorted(d.LookupHash(h)); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("a millisecond before it expires: %v, want 1 2 3", got)
	}
	d.Expire(10*bucketsPerWindow + 20)
	if got := sorted(d.LookupHash(h)); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("as it expires: %v, want 2 3", got)
	}
	d.Expire(10*bucketsPerWindow + 30)
	if got := d.LookupHash(h); len(got) != 0 || d.Oldest() != 4 {
		t.Fatalf("as the next expires: %v, oldest %d; want none, oldest 4", got, d.Oldest())
	}
	d.Expire(10*bucketsPerWindow + 40)
	if len(d.buckets) != 0 || d.Oldest() != -1 {
		t.Fatalf("as the last expires: %d buckets, oldest %d; want none", len(d.buckets), d.Oldest())
	}
}

// Ids whose hashes differ but share a fingerprint are all candidates when
// they share a probe run too; one with another fingerprint in the same run
// is not.
func TestDedupFingerprintCollisions(t *testing.T) {
	d := NewWindow(100)
	home := uint64(5) << 56 // start slot 5 of the bucket's first table of 256 slots
	a := unmixHash(home | 0xabcdef)
	b := unmixHash(home | 1<<40 | 0xabcdef) // other bits, same fingerprint and start
	c := unmixHash(home | 0xabcdee)         // same start, another fingerprint
	for i, h := range []uint64{a, b, c} {
		d.AddHash(h, 10, int64(i))
	}
	if got := sorted(d.LookupHash(a)); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("candidates of a: %v, want 0 1", got)
	}
	if got := sorted(d.LookupHash(b)); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("candidates of b: %v, want 0 1", got)
	}
	if got := d.LookupHash(c); !slices.Equal(got, []int64{2}) {
		t.Fatalf("candidates of c: %v, want 2", got)
	}
	if got := d.LookupHash(unmixHash(home | 0x123456)); len(got) != 0 {
		t.Fatalf("an absent fingerprint found %v", got)
	}
}

// An offset that a table's 40 bits cannot hold relative to its base starts
// another table: answers are the same on either side of the limit.
func TestDedupRelativeOffsetLimit(t *testing.T) {
	d := NewWindow(100)
	base := int64(1000)
	offsets := []int64{base, base + maxRel - 1, base + maxRel, base + maxRel + 1}
	for i, off := range offsets {
		d.AddHash(uint64(i), 10, off)
	}
	if n := len(d.buckets[0].tables); n != 2 {
		t.Fatalf("%d tables, want 2 (the last offset past the limit)", n)
	}
	for i, off := range offsets {
		if got := d.LookupHash(uint64(i)); !slices.Equal(got, []int64{off}) {
			t.Fatalf("offset %d answered as %v", off, got)
		}
	}
}

// A table takes ids up to maxLoad of its slots; the next starts
// another table, and every id is still found.
func TestDedupTableLoadLimit(t *testing.T) {
	d := NewWindow(100)
	full := dedupMinTable * maxLoad / 100
	for i := range full {
		d.AddHash(uint64(i), 10, int64(i))
	}
	if n := len(d.buckets[0].tables); n != 1 {
		t.Fatalf("%d tables at the load limit, want 1", n)
	}
	d.AddHash(uint64(full), 10, int64(full))
	if n := len(d.buckets[0].tables); n != 2 {
		t.Fatalf("%d tables past the load limit, want 2", n)
	}
	for i := range full + 1 {
		if got := d.LookupHash(uint64(i)); !slices.Contains(got, int64(i)) {
			t.Fatalf("id %d not found: %v", i, got)
		}
	}
}

// A bucket is dropped when its last millisecond leaves the window, never
// before: an id is kept at least the window and less than the window plus
// a bucket's width; within draws the exact line a confirmed hit must pass.
func TestDedupBucketEdges(t *testing.T) {
	for _, window := range []int64{0, 1, 9, 10, 100, 105, 600_000} {
		d := NewWindow(window)
		width := d.width
		if want := max(1, (window+bucketsPerWindow-1)/bucketsPerWindow); width != want {
			t.Fatalf("window %d: width %d, want %d", window, width, want)
		}
		first, last := 7*width, 8*width-1 // one bucket's first and last millisecond
		d.AddHash(1, first, 0)
		d.AddHash(2, last, 1)
		d.AddHash(3, last+1, 2) // the next bucket
		if len(d.buckets) != 2 {
			t.Fatalf("window %d: %d buckets, want 2", window, len(d.buckets))
		}
		if !d.Within(first, first+window) || d.Within(first, first+window+1) {
			t.Fatalf("window %d: within is not exact at the edge", window)
		}
		d.Expire(last + window) // the bucket's last millisecond is still within
		if got := d.LookupHash(1); len(got) != 1 {
			t.Fatalf("window %d: first id forgotten at %d", window, last+window)
		}
		d.Expire(last + window + 1)
		if len(d.LookupHash(1)) != 0 || len(d.LookupHash(2)) != 0 || len(d.LookupHash(3)) != 1 {
			t.Fatalf("window %d: at %d the bucket [%d, %d] should be gone, the next kept", window, last+window+1, first, last)
		}
		if d.Oldest() != 2 {
			t.Fatalf("window %d: oldest %d, want 2", window, d.Oldest())
		}
	}
}

// Retention cutting through a bucket: what lies before the cut is no
// longer answered, what lies from it on is, and the window is rebuilt
// from the cut.
func TestDedupForgetBeforeStraddlingABucket(t *testing.T) {
	d := NewWindow(10 * bucketsPerWindow) // buckets of 10 ms
	for i := range 10 {
		d.AddHash(uint64(i), 10, int64(100+i*10)) // offsets 100..190, one bucket
	}
	d.AddHash(10, 20, 200) // the next bucket
	d.ForgetBefore(100)    // the first offset: nothing goes
	if d.Oldest() != 100 || len(d.LookupHash(0)) != 1 {
		t.Fatalf("a cut at the first offset forgot something: oldest %d", d.Oldest())
	}
	d.ForgetBefore(149) // just past 140, just before 150
	for i := range 11 {
		got, want := d.LookupHash(uint64(i)), 100+int64(i)*10 >= 149
		if (len(got) == 1) != want {
			t.Fatalf("after a cut at 149, offset %d answered %v", 100+i*10, got)
		}
	}
	if d.Oldest() != 149 || len(d.buckets) != 2 {
		t.Fatalf("oldest %d with %d buckets, want 149 with 2", d.Oldest(), len(d.buckets))
	}
	d.ForgetBefore(190) // the bucket's last offset stays
	if len(d.buckets) != 2 || len(d.LookupHash(9)) != 1 || len(d.LookupHash(8)) != 0 {
		t.Fatal("a cut at the bucket's last offset dropped it")
	}
	d.ForgetBefore(191) // just past it: the bucket goes
	if len(d.buckets) != 1 || d.Oldest() != 200 || len(d.LookupHash(10)) != 1 {
		t.Fatalf("after a cut past the bucket: %d buckets, oldest %d", len(d.buckets), d.Oldest())
	}
	d.ForgetBefore(150) // a lower cut changes nothing
	if d.Oldest() != 200 {
		t.Fatalf("a lower cut moved oldest to %d", d.Oldest())
	}
	d.ForgetBefore(201)
	if d.Oldest() != -1 || len(d.LookupHash(10)) != 0 {
		t.Fatalf("after the last cut: oldest %d", d.Oldest())
	}
}

// The state machine's test of a fingerprint collision (fsm's
// collidingIDs) uses these two ids: they must share a fingerprint and a
// start slot in a first table of 256 slots while their hashes differ.
func TestCollidingIDsShareASlot(t *testing.T) {
	a, b := mixHash(HashID("fp10536")), mixHash(HashID("fp119258"))
	if a == b || a>>56 != b>>56 || a&fpMask != b&fpMask {
		t.Fatalf("fp10536 and fp119258 no longer collide: %x, %x", a, b)
	}
}
