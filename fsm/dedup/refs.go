package dedup

// Refs remembers the ids scheduled for later within the window, by
// schedule reference (an hour and an offset into it, see delaywheel.MakeRef).
// References do not grow along one log, so the packed tables of Window do not
// fit them; and sweepHours removes an hour one window after its last append,
// so an id must be forgotten exactly when its window has passed, never a
// moment later (a later lookup would read a removed hour). It keeps 64-bit
// hashes of ids, not the ids: a hit is confirmed by reading the record it
// points at. Ids whose hashes collide are all kept (in more), so a collision
// costs a read, never a duplicate or a lost message.
type Refs struct {
	window int64             // milliseconds
	seen   map[uint64]Seen   // id hash → newest record with it
	more   map[uint64][]Seen // older records whose ids share that hash
	fifo   []refEntry        // in append order, so in appended-at order
}

// Seen is one record Refs remembers.
type Seen struct {
	Offset int64 // schedule reference
}

type refEntry struct {
	hash       uint64
	appendedAt int64
	offset     int64
}

// NewRefs returns an empty Refs of window milliseconds.
func NewRefs(window int64) *Refs {
	return &Refs{window: window, seen: map[uint64]Seen{}, more: map[uint64][]Seen{}}
}

// LookupHash returns the records scheduled with an id of hash h: the
// candidates to read and compare.
func (d *Refs) LookupHash(h uint64) []Seen {
	s, ok := d.seen[h]
	if !ok {
		return nil
	}
	return append([]Seen{s}, d.more[h]...)
}

// AddHash records a record scheduled at time appendedAt, whose id (of hash
// h) the caller found to be new.
func (d *Refs) AddHash(h uint64, appendedAt int64, s Seen) {
	if old, ok := d.seen[h]; ok {
		d.more[h] = append(d.more[h], old) // another id with the same hash
	}
	d.seen[h] = s
	d.fifo = append(d.fifo, refEntry{hash: h, appendedAt: appendedAt, offset: s.Offset})
}

// Within says whether a record scheduled at appendedAt is in the window
// ending at now: expire keeps exactly those.
func (d *Refs) Within(appendedAt, now int64) bool { return appendedAt >= now-d.window }

// Expire forgets ids scheduled before now minus the window.
func (d *Refs) Expire(now int64) {
	n := 0
	for n < len(d.fifo) && !d.Within(d.fifo[n].appendedAt, now) {
		n++
	}
	for _, e := range d.fifo[:n] {
		d.Forget(e.hash, e.offset)
	}
	if n > 0 {
		d.fifo = d.fifo[n:]
		if cap(d.fifo) > 1024 && len(d.fifo) < cap(d.fifo)/4 {
			d.fifo = append([]refEntry(nil), d.fifo...)
		}
	}
}

// Forget removes the record at offset from the entries of hash h.
func (d *Refs) Forget(h uint64, offset int64) {
	more := d.more[h]
	if d.seen[h].Offset == offset {
		if len(more) == 0 {
			delete(d.seen, h)
			return
		}
		d.seen[h], more = more[len(more)-1], more[:len(more)-1]
	} else {
		for i, s := range more {
			if s.Offset == offset {
				more = append(more[:i], more[i+1:]...)
				break
			}
		}
	}
	if len(more) == 0 {
		delete(d.more, h)
	} else {
		d.more[h] = more
	}
}
