package fsm

import "hash/fnv"

// dedup remembers the message ids appended within the window, so that a
// producer retrying a send (after a timeout or a leader change) does not
// append the message twice.
//
// The window is split into buckets of dedupBuckets-th of it, aligned to
// absolute time: an id appended at t goes to bucket floor(t / width), so
// every replica, and one rebuilding the window from the message log, puts
// it in the same bucket. Each bucket holds its ids in dedupTables (8 bytes
// an id, see dedup_table.go), sized from the previous bucket's count; a
// bucket that outgrows them gets one more table, so nothing is ever rehashed.
// Expiry drops whole buckets, once the last millisecond of a bucket is
// older than the window: a bucket keeps an id for at least the window and
// less than the window plus a bucket's width. A lookup probes every table
// of every live bucket and returns the offsets whose fingerprints match; the
// caller confirms each by reading the message, which must have the id and
// have been appended within the window (within), so the window answers
// exactly as one expiring each id on time would, and a fingerprint or hash
// collision costs a read, never a duplicate or a lost message.
type dedup struct {
	window  int64 // milliseconds
	width   int64 // of a bucket, milliseconds (at least 1)
	buckets []*dedupBucket
	// floor is the message log's start after retention: ids of messages
	// before it are no longer answered (a bucket straddling it keeps their
	// slots until it expires).
	floor int64
	hint  int     // ids of the newest bucket closed, to size the next
	out   []int64 // reused by lookup
	// touched keeps lookup's first loads from being optimised away.
	touched uint64
}

// dedupBuckets is how many buckets the window spans: an id is remembered at
// most a dedupBuckets-th of the window longer than the window.
const dedupBuckets = 3

// A dedupBucket holds the ids appended within one bucket's width.
type dedupBucket struct {
	id     int64 // floor(appended-at / width)
	first  int64 // offset of its first id
	last   int64 // offset of its last id
	n      int   // ids
	tables []*dedupTable
}

func newDedup(window int64) *dedup {
	return &dedup{window: window, width: max(1, (window+dedupBuckets-1)/dedupBuckets)}
}

func hashID(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// lookup returns the offsets of the messages remembered with id's
// fingerprint: the candidates to read and compare. The slice is valid until
// the next call.
func (d *dedup) lookup(id string) []int64 { return d.lookupHash(hashID(id)) }

func (d *dedup) lookupHash(h uint64) []int64 {
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

// add records a message appended at time appendedAt at offset off, whose
// id the caller found to be new. Offsets only grow from one add to the next.
func (d *dedup) add(id string, appendedAt, off int64) { d.addHash(hashID(id), appendedAt, off) }

func (d *dedup) addHash(h uint64, appendedAt, off int64) {
	id := floorDiv(appendedAt, d.width)
	var b *dedupBucket
	if len(d.buckets) > 0 {
		b = d.buckets[len(d.buckets)-1]
	}
	// Appended-at never goes back along the message log; were it to, the id
	// would join the newest bucket, remembered longer, never shorter.
	if b == nil || id > b.id {
		if b != nil {
			d.hint = b.n
		}
		b = &dedupBucket{id: id, first: off}
		d.buckets = append(d.buckets, b)
	}
	var t *dedupTable
	if len(b.tables) > 0 {
		t = b.tables[len(b.tables)-1]
	}
	if t == nil || !t.fits(off) {
		t = newDedupTable(off, d.tableSize(b, appendedAt))
		b.tables = append(b.tables, t)
	}
	t.insert(mixHash(h), off)
	b.last = off
	b.n++
}

// within reports whether an id appended at appendedAt is within the window
// at now: the rule a confirmed hit must pass.
func (d *dedup) within(appendedAt, now int64) bool { return appendedAt >= now-d.window }

// tableSize returns the slots of a new table for bucket b, about to take an
// id appended at appendedAt. A new bucket's first table is sized for as many
// ids as the previous bucket took. A bucket that outgrew its tables gets
// one sized for the rest of its width at the rate it has seen so far, but
// at least half and at most four times the slots it has: few tables to
// probe when the rate rose, a bounded excess when a burst misled it.
func (d *dedup) tableSize(b *dedupBucket, appendedAt int64) int {
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

// expire forgets the buckets whose every millisecond is before now minus
// the window, that is, whose last millisecond is not within it.
func (d *dedup) expire(now int64) {
	n := 0
	for n < len(d.buckets) && !d.within((d.buckets[n].id+1)*d.width-1, now) {
		n++
	}
	d.drop(n)
}

// forgetBefore forgets ids whose messages lie before message-log offset
// off, which retention removed, so no lookup points at a removed message:
// the buckets wholly before off go, and a bucket straddling it answers only
// from off on. The window then answers as the one load rebuilds from the
// log from off.
func (d *dedup) forgetBefore(off int64) {
	d.floor = max(d.floor, off)
	n := 0
	for n < len(d.buckets) && d.buckets[n].last < off {
		n++
	}
	d.drop(n)
}

// drop forgets the oldest n buckets.
func (d *dedup) drop(n int) {
	if n > 0 {
		clear(d.buckets[:n])
		d.buckets = append(d.buckets[:0], d.buckets[n:]...)
	}
}

// oldest returns the message-log offset from which the window can be rebuilt
// (the first id of its oldest bucket, or the floor if retention removed
// part of that bucket), or -1 when it remembers nothing. A checkpoint
// records it: recovery rebuilds the window by scanning the message log from
// there.
func (d *dedup) oldest() int64 {
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
