package fsm

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
	d := newDedup(10 * dedupBuckets) // buckets of 10 ms
	const h = 42
	d.addHash(h, 10, 1)
	d.addHash(h, 20, 2)
	d.addHash(h, 29, 3)
	d.addHash(7, 30, 4)
	if got := sorted(d.lookupHash(h)); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("candidates %v, want 1 2 3", got)
	}
	d.expire(10*dedupBuckets + 19) // the bucket [10, 20) is still within the window
	if got := sorted(d.lookupHash(h)); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("a millisecond before it expires: %v, want 1 2 3", got)
	}
	d.expire(10*dedupBuckets + 20)
	if got := sorted(d.lookupHash(h)); !slices.Equal(got, []int64{2, 3}) {
		t.Fatalf("as it expires: %v, want 2 3", got)
	}
	d.expire(10*dedupBuckets + 30)
	if got := d.lookupHash(h); len(got) != 0 || d.oldest() != 4 {
		t.Fatalf("as the next expires: %v, oldest %d; want none, oldest 4", got, d.oldest())
	}
	d.expire(10*dedupBuckets + 40)
	if len(d.buckets) != 0 || d.oldest() != -1 {
		t.Fatalf("as the last expires: %d buckets, oldest %d; want none", len(d.buckets), d.oldest())
	}
}

// Ids whose hashes differ but share a fingerprint are all candidates when
// they share a probe run too; one with another fingerprint in the same run
// is not.
func TestDedupFingerprintCollisions(t *testing.T) {
	d := newDedup(100)
	home := uint64(5) << 56 // start slot 5 of the bucket's first table of 256 slots
	a := unmixHash(home | 0xabcdef)
	b := unmixHash(home | 1<<40 | 0xabcdef) // other bits, same fingerprint and start
	c := unmixHash(home | 0xabcdee)         // same start, another fingerprint
	for i, h := range []uint64{a, b, c} {
		d.addHash(h, 10, int64(i))
	}
	if got := sorted(d.lookupHash(a)); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("candidates of a: %v, want 0 1", got)
	}
	if got := sorted(d.lookupHash(b)); !slices.Equal(got, []int64{0, 1}) {
		t.Fatalf("candidates of b: %v, want 0 1", got)
	}
	if got := d.lookupHash(c); !slices.Equal(got, []int64{2}) {
		t.Fatalf("candidates of c: %v, want 2", got)
	}
	if got := d.lookupHash(unmixHash(home | 0x123456)); len(got) != 0 {
		t.Fatalf("an absent fingerprint found %v", got)
	}
}

// An offset that a table's 40 bits cannot hold relative to its base starts
// another table: answers are the same on either side of the limit.
func TestDedupRelativeOffsetLimit(t *testing.T) {
	d := newDedup(100)
	base := int64(1000)
	offsets := []int64{base, base + dedupMaxRel - 1, base + dedupMaxRel, base + dedupMaxRel + 1}
	for i, off := range offsets {
		d.addHash(uint64(i), 10, off)
	}
	if n := len(d.buckets[0].tables); n != 2 {
		t.Fatalf("%d tables, want 2 (the last offset past the limit)", n)
	}
	for i, off := range offsets {
		if got := d.lookupHash(uint64(i)); !slices.Equal(got, []int64{off}) {
			t.Fatalf("offset %d answered as %v", off, got)
		}
	}
}

// A table takes ids up to dedupMaxLoad of its slots; the next starts
// another table, and every id is still found.
func TestDedupTableLoadLimit(t *testing.T) {
	d := newDedup(100)
	full := dedupMinTable * dedupMaxLoad / 100
	for i := range full {
		d.addHash(uint64(i), 10, int64(i))
	}
	if n := len(d.buckets[0].tables); n != 1 {
		t.Fatalf("%d tables at the load limit, want 1", n)
	}
	d.addHash(uint64(full), 10, int64(full))
	if n := len(d.buckets[0].tables); n != 2 {
		t.Fatalf("%d tables past the load limit, want 2", n)
	}
	for i := range full + 1 {
		if got := d.lookupHash(uint64(i)); !slices.Contains(got, int64(i)) {
			t.Fatalf("id %d not found: %v", i, got)
		}
	}
}

// A bucket is dropped when its last millisecond leaves the window, never
// before: an id is kept at least the window and less than the window plus
// a bucket's width; within draws the exact line a confirmed hit must pass.
func TestDedupBucketEdges(t *testing.T) {
	for _, window := range []int64{0, 1, 9, 10, 100, 105, 600_000} {
		d := newDedup(window)
		width := d.width
		if want := max(1, (window+dedupBuckets-1)/dedupBuckets); width != want {
			t.Fatalf("window %d: width %d, want %d", window, width, want)
		}
		first, last := 7*width, 8*width-1 // one bucket's first and last millisecond
		d.addHash(1, first, 0)
		d.addHash(2, last, 1)
		d.addHash(3, last+1, 2) // the next bucket
		if len(d.buckets) != 2 {
			t.Fatalf("window %d: %d buckets, want 2", window, len(d.buckets))
		}
		if !d.within(first, first+window) || d.within(first, first+window+1) {
			t.Fatalf("window %d: within is not exact at the edge", window)
		}
		d.expire(last + window) // the bucket's last millisecond is still within
		if got := d.lookupHash(1); len(got) != 1 {
			t.Fatalf("window %d: first id forgotten at %d", window, last+window)
		}
		d.expire(last + window + 1)
		if len(d.lookupHash(1)) != 0 || len(d.lookupHash(2)) != 0 || len(d.lookupHash(3)) != 1 {
			t.Fatalf("window %d: at %d the bucket [%d, %d] should be gone, the next kept", window, last+window+1, first, last)
		}
		if d.oldest() != 2 {
			t.Fatalf("window %d: oldest %d, want 2", window, d.oldest())
		}
	}
}

// Retention cutting through a bucket: what lies before the cut is no
// longer answered, what lies from it on is, and the window is rebuilt
// from the cut.
func TestDedupForgetBeforeStraddlingABucket(t *testing.T) {
	d := newDedup(10 * dedupBuckets) // buckets of 10 ms
	for i := range 10 {
		d.addHash(uint64(i), 10, int64(100+i*10)) // offsets 100..190, one bucket
	}
	d.addHash(10, 20, 200) // the next bucket
	d.forgetBefore(100)    // the first offset: nothing goes
	if d.oldest() != 100 || len(d.lookupHash(0)) != 1 {
		t.Fatalf("a cut at the first offset forgot something: oldest %d", d.oldest())
	}
	d.forgetBefore(149) // just past 140, just before 150
	for i := range 11 {
		got, want := d.lookupHash(uint64(i)), 100+int64(i)*10 >= 149
		if (len(got) == 1) != want {
			t.Fatalf("after a cut at 149, offset %d answered %v", 100+i*10, got)
		}
	}
	if d.oldest() != 149 || len(d.buckets) != 2 {
		t.Fatalf("oldest %d with %d buckets, want 149 with 2", d.oldest(), len(d.buckets))
	}
	d.forgetBefore(190) // the bucket's last offset stays
	if len(d.buckets) != 2 || len(d.lookupHash(9)) != 1 || len(d.lookupHash(8)) != 0 {
		t.Fatal("a cut at the bucket's last offset dropped it")
	}
	d.forgetBefore(191) // just past it: the bucket goes
	if len(d.buckets) != 1 || d.oldest() != 200 || len(d.lookupHash(10)) != 1 {
		t.Fatalf("after a cut past the bucket: %d buckets, oldest %d", len(d.buckets), d.oldest())
	}
	d.forgetBefore(150) // a lower cut changes nothing
	if d.oldest() != 200 {
		t.Fatalf("a lower cut moved oldest to %d", d.oldest())
	}
	d.forgetBefore(201)
	if d.oldest() != -1 || len(d.lookupHash(10)) != 0 {
		t.Fatalf("after the last cut: oldest %d", d.oldest())
	}
}
