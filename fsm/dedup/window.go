// Package dedup holds the state machine's dedup windows: the ids of the
// messages appended within the window (Window, probed on every append) and
// of the delayed messages scheduled within it (Refs). Both are rebuilt by
// every replica from the same log entries, so they answer alike on every
// node; a hash or fingerprint collision costs the caller a read of the
// message, never a duplicate or a lost message.
package dedup

import "hash/fnv"

// Window remembers the message ids appended within the window, so that a
// producer retrying a send (after a timeout or a leader change) does not
// append the message twice.
//
// The window is split into buckets of bucketsPerWindow-th of it, aligned to
// absolute time: an id appended at t goes to bucket floor(t / width), so
// every replica, and one rebuilding the window from the message log, puts
// it in the same bucket. Each bucket holds its ids in tables (8 bytes
// an id, see table.go), sized from the previous bucket's count; a
// bucket that outgrows them gets one more table, so nothing is ever rehashed.
// Expiry drops whole buckets, once the last millisecond of a bucket is
// older than the window: a bucket keeps an id for at least the window and
// less than the window plus a bucket's width. A lookup probes every table
// of every live bucket and returns the offsets whose fingerprints match; the
// caller confirms each by reading the message, which must have the id and
// have been appended within the window (within), so the window answers
// exactly as one expiring each id on time would, and a fingerprint or hash
// collision costs a read, never a duplicate or a lost message.
type Window struct {
	window  int64 // milliseconds
	width   int64 // of a bucket, milliseconds (at least 1)
	buckets []*bucket
	// floor is the message log's start after retention: ids of messages
	// before it are no longer answered (a bucket straddling it keeps their
	// slots until it expires).
	floor int64
	hint  int     // ids of the newest bucket closed, to size the next
	out   []int64 // reused by lookup
	// touched keeps lookup's first loads from being optimised away.
	touched uint64
}

// bucketsPerWindow is how many buckets the window spans: an id is remembered at
// most a bucketsPerWindow-th of the window longer than the window.
const bucketsPerWindow = 3

// A bucket holds the ids appended within one bucket's width.
type bucket struct {
	id     int64 // floor(appended-at / width)
	first  int64 // offset of its first id
	last   int64 // offset of its last id
	n      int   // ids
	tables []*table
}

// NewWindow returns an empty window of window milliseconds.
func NewWindow(window int64) *Window {
	return &Window{window: window, width: max(1, (window+bucketsPerWindow-1)/bucketsPerWindow)}
}

// HashID is the 64-bit hash of a message id both windows key on
// (FNV-1a), computed once per message by the caller.
func HashID(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// Lookup returns the offsets of the messages remembered with id's
// fingerprint: the candidates to read and compare. The slice is valid until
// the next call.
func (d *Window) Lookup(id string) []int64 { return d.LookupHash(HashID(id)) }

func (d *Window) LookupHash(h uint64) []int64 {
	m := mixHash(h)
	// Load every table's first slot before probing any: the loads do not
	// depend on one another, so the processor overlaps their cache misses
	// instead of waiting for each in turn behind a branch on the last.
	var touch uint64
	for _, b := range d.buckets {
		for _, t := range b.tables {
			touch ^= t.slots[t.home(m)]
		}
	}
	d.touched = touch
	d.out = d.out[:0]
	for _, b := range d.buckets {
		for _, t := range b.tables {
			d.out = t.find(m, d.floor, d.out)
		}
	}
	return d.out
}

// Add records a message appended at time appendedAt at offset off, whose
// id the caller found to be new. Offsets only grow from one Add to the next.
func (d *Window) Add(id string, appendedAt, off int64) { d.AddHash(HashID(id), appendedAt, off) }

func (d *Window) AddHash(h uint64, appendedAt, off int64) {
	id := floorDiv(appendedAt, d.width)
	var b *bucket
	if len(d.buckets) > 0 {
		b = d.buckets[len(d.buckets)-1]
	}
	// Appended-at never goes back along the message log; were it to, the id
	// would join the newest bucket, remembered longer, never shorter.
	if b == nil || id > b.id {
		if b != nil {
			d.hint = b.n
		}
		b = &bucket{id: id, first: off}
		d.buckets = append(d.buckets, b)
	}
	var t *table
	if len(b.tables) > 0 {
		t = b.tables[len(b.tables)-1]
	}
	if t == nil || !t.fits(off) {
		t = newTable(off, d.tableSize(b, appendedAt))
		b.tables = append(b.tables, t)
	}
	t.insert(mixHash(h), off)
	b.last = off
	b.n++
}

// Within reports whether an id appended at appendedAt is Within the window
// at now: the rule a confirmed hit must pass.
func (d *Window) Within(appendedAt, now int64) bool { return appendedAt >= now-d.window }

// tableSize returns the slots of a new table for bucket b, about to take an
// id appended at appendedAt. A new bucket's first table is sized for as many
// ids as the previous bucket took. A bucket that outgrew its tables gets
// one sized for the rest of its width at the rate it has seen so far, but
// at least half and at most four times the slots it has: few tables to
// probe when the rate rose, a bounded excess when a burst misled it.
func (d *Window) tableSize(b *bucket, appendedAt int64) int {
	if len(b.tables) == 0 {
		return d.hint * 100 / dedupTargetLoad
	}
	have := 0
	for _, t := range b.tables {
		have += len(t.slots)
	}
	elapsed := max(1, appendedAt-b.id*d.width+1)
	rest := float64(b.n) * float64(d.width-elapsed) / float64(elapsed) * 100 / dedupTargetLoad
	return int(min(max(rest, float64(have/2)), float64(4*have)))
}

// Expire forgets the buckets whose every millisecond is before now minus
// the window, that is, whose last millisecond is not within it.
func (d *Window) Expire(now int64) {
	n := 0
	for n < len(d.buckets) && !d.Within((d.buckets[n].id+1)*d.width-1, now) {
		n++
	}
	d.Drop(n)
}

// ForgetBefore forgets ids whose messages lie before message-log offset
// off, which retention removed, so no lookup points at a removed message:
// the buckets wholly before off go, and a bucket straddling it answers only
// from off on. The window then answers as the one load rebuilds from the
// log from off.
func (d *Window) ForgetBefore(off int64) {
	d.floor = max(d.floor, off)
	n := 0
	for n < len(d.buckets) && d.buckets[n].last < off {
		n++
	}
	d.Drop(n)
}

// Drop forgets the oldest n buckets.
func (d *Window) Drop(n int) {
	if n > 0 {
		clear(d.buckets[:n])
		d.buckets = append(d.buckets[:0], d.buckets[n:]...)
	}
}

// Oldest returns the message-log offset from which the window can be rebuilt
// (the first id of its Oldest bucket, or the floor if retention removed
// part of that bucket), or -1 when it remembers nothing. A checkpoint
// records it: recovery rebuilds the window by scanning the message log from
// there.
func (d *Window) Oldest() int64 {
	if len(d.buckets) == 0 {
		return -1
	}
	return max(d.buckets[0].first, d.floor)
}

// floorDiv returns a / b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Buckets returns the first offset of each bucket the window holds, oldest
// first: how the window is cut, for tests of the state machine that cut it
// with retention.
func (d *Window) Buckets() []int64 {
	firsts := make([]int64, len(d.buckets))
	for i, b := range d.buckets {
		firsts[i] = b.first
	}
	return firsts
}
