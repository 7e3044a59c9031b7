package fsm

import "hash/fnv"

// dedup remembers the message ids appended within the window, so that a
// producer retrying a send (after a timeout or a leader change) does not
// append the message twice. It keeps 64-bit hashes of ids, not the ids: a
// hash hit is confirmed by reading the message it points at. Ids whose
// hashes collide are all kept (in more), so a collision costs a read, never
// a duplicate or a lost message.
type dedup struct {
	window int64             // milliseconds
	seen   map[uint64]seen   // id hash → newest message with it
	more   map[uint64][]seen // older messages whose ids share that hash
	fifo   []dedupEntry      // in append order, so in appended-at order
}

type seen struct {
	offset int64 // message-log offset
	size   int
}

type dedupEntry struct {
	hash       uint64
	appendedAt int64
	offset     int64
}

func newDedup(window int64) *dedup {
	return &dedup{window: window, seen: map[uint64]seen{}, more: map[uint64][]seen{}}
}

func hashID(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// lookup returns the messages appended with id's hash: the candidates to
// read and compare.
func (d *dedup) lookup(id string) []seen { return d.lookupHash(hashID(id)) }

func (d *dedup) lookupHash(h uint64) []seen {
	s, ok := d.seen[h]
	if !ok {
		return nil
	}
	return append([]seen{s}, d.more[h]...)
}

// add records a message appended at time appendedAt, whose id the caller
// found to be new.
func (d *dedup) add(id string, appendedAt int64, s seen) { d.addHash(hashID(id), appendedAt, s) }

func (d *dedup) addHash(h uint64, appendedAt int64, s seen) {
	if old, ok := d.seen[h]; ok {
		d.more[h] = append(d.more[h], old) // another id with the same hash
	}
	d.seen[h] = s
	d.fifo = append(d.fifo, dedupEntry{hash: h, appendedAt: appendedAt, offset: s.offset})
}

// expire forgets ids appended before now minus the window.
func (d *dedup) expire(now int64) {
	n := 0
	for n < len(d.fifo) && d.fifo[n].appendedAt < now-d.window {
		n++
	}
	d.drop(n)
}

// forgetBefore forgets ids whose messages lie before message-log offset
// off, which retention removed: the window then holds exactly what load
// rebuilds from the log, and never points at a removed message.
func (d *dedup) forgetBefore(off int64) {
	n := 0
	for n < len(d.fifo) && d.fifo[n].offset < off {
		n++
	}
	d.drop(n)
}

// drop forgets the oldest n ids.
func (d *dedup) drop(n int) {
	for _, e := range d.fifo[:n] {
		d.forget(e.hash, e.offset)
	}
	if n > 0 {
		d.fifo = d.fifo[n:]
		if cap(d.fifo) > 1024 && len(d.fifo) < cap(d.fifo)/4 {
			d.fifo = append([]dedupEntry(nil), d.fifo...)
		}
	}
}

// oldest returns the message-log offset of the oldest remembered id, or -1.
// A checkpoint records it: recovery rebuilds the window by scanning the
// message log from there.
func (d *dedup) oldest() int64 {
	if len(d.fifo) == 0 {
		return -1
	}
	return d.fifo[0].offset
}

// forget removes the message at offset from the entries of hash h.
func (d *dedup) forget(h uint64, offset int64) {
	more := d.more[h]
	if d.seen[h].offset == offset {
		if len(more) == 0 {
			delete(d.seen, h)
			return
		}
		d.seen[h], more = more[len(more)-1], more[:len(more)-1]
	} else {
		for i, s := range more {
			if s.offset == offset {
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
