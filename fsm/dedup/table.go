package dedup

import "math/bits"

// A table is an open-addressing hash table (linear probing) of 8-byte
// slots, each naming one remembered id by a fingerprint of its hash and its
// message's offset relative to the table's base:
//
//	 63          40 39                                  0
//	+--------------+-------------------------------------+
//	| fingerprint  | offset - base + 1                   |
//	|   24 bits    |              40 bits                |
//	+--------------+-------------------------------------+
//
// A zero slot is empty (the +1 keeps a used slot non-zero). The fingerprint
// is the low 24 bits of the mixed hash; the slot an id starts probing from
// is taken from its high bits (hash × capacity, high word), so an id is found
// only by ids that share both. Slots are never removed: a table is dropped
// whole when its bucket expires. It never fills beyond maxLoad, so a
// probe always meets an empty slot.
type table struct {
	base  int64 // offset of the first id added
	slots []uint64
	n     int // used slots
}

const (
	fpBits  = 24
	relBits = 64 - fpBits
	relMask = 1<<relBits - 1
	fpMask  = 1<<fpBits - 1
	// maxRel is the largest offset - base a slot can hold.
	maxRel = relMask - 1

	// A table is sized for dedupTargetLoad of the ids expected and
	// takes no more than maxLoad (percent) of its slots.
	dedupTargetLoad = 65
	maxLoad         = 80
	// dedupMinTable is the fewest slots of a table (2 KiB).
	dedupMinTable = 256
)

// mixHash spreads every bit of an id hash over the whole word (murmur3's
// finalizer, a bijection): fnv64a's low bits depend only on the ids' low
// bits, and both the start slot and the fingerprint need well-mixed bits.
func mixHash(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

func newTable(base int64, slots int) *table {
	return &table{base: base, slots: make([]uint64, max(slots, dedupMinTable))}
}

// fits reports whether the table can take one more id at offset off.
func (t *table) fits(off int64) bool {
	return (t.n+1)*100 <= len(t.slots)*maxLoad && off >= t.base && off-t.base <= maxRel
}

// home returns the slot where mixed hash m starts probing.
func (t *table) home(m uint64) int {
	hi, _ := bits.Mul64(m, uint64(len(t.slots)))
	return int(hi)
}

// insert adds the id of mixed hash m at offset off; the caller checked fits.
func (t *table) insert(m uint64, off int64) {
	slot := (m&fpMask)<<relBits | uint64(off-t.base+1)
	i := t.home(m)
	for t.slots[i] != 0 {
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	t.slots[i] = slot
	t.n++
}

// find appends to out the offsets of the ids whose fingerprint matches
// mixed hash m, from floor on.
func (t *table) find(m uint64, floor int64, out []int64) []int64 {
	fp := m & fpMask
	i := t.home(m)
	for {
		s := t.slots[i]
		if s == 0 {
			return out
		}
		if s>>relBits == fp {
			if off := t.base + int64(s&relMask) - 1; off >= floor {
				out = append(out, off)
			}
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}
