package fsm

import "math/bits"

// A dedupTable is an open-addressing hash table (linear probing) of 8-byte
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
// whole when its bucket expires. It never fills beyond dedupMaxLoad, so a
// probe always meets an empty slot.
type dedupTable struct {
	base  int64 // offset of the first id added
	slots []uint64
	n     int // used slots
}

const (
	dedupFPBits  = 24
	dedupRelBits = 64 - dedupFPBits
	dedupRelMask = 1<<dedupRelBits - 1
	dedupFPMask  = 1<<dedupFPBits - 1
	// dedupMaxRel is the largest offset - base a slot can hold.
	dedupMaxRel = dedupRelMask - 1

	// A table is sized for dedupTargetLoad of the ids expected and
	// takes no more than dedupMaxLoad (percent) of its slots.
	dedupTargetLoad = 65
	dedupMaxLoad    = 80
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

func newDedupTable(base int64, slots int) *dedupTable {
	return &dedupTable{base: base, slots: make([]uint64, max(slots, dedupMinTable))}
}

// fits reports whether the table can take one more id at offset off.
func (t *dedupTable) fits(off int64) bool {
	return (t.n+1)*100 <= len(t.slots)*dedupMaxLoad && off >= t.base && off-t.base <= dedupMaxRel
}

// home returns the slot where mixed hash m starts probing.
func (t *dedupTable) home(m uint64) int {
	hi, _ := bits.Mul64(m, uint64(len(t.slots)))
	return int(hi)
}

// insert adds the id of mixed hash m at offset off; the caller checked fits.
func (t *dedupTable) insert(m uint64, off int64) {
	slot := (m&dedupFPMask)<<dedupRelBits | uint64(off-t.base+1)
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
func (t *dedupTable) find(m uint64, floor int64, out []int64) []int64 {
	fp := m & dedupFPMask
	i := t.home(m)
	for {
		s := t.slots[i]
		if s == 0 {
			return out
		}
		if s>>dedupRelBits == fp {
			if off := t.base + int64(s&dedupRelMask) - 1; off >= floor {
				out = append(out, off)
			}
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}
