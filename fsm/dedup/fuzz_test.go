package dedup

import (
	"slices"
	"testing"
)

// model is the reference the fuzz test compares dedup with: the
// message log as a list, and the rule spelled out plainly — an id is a
// duplicate when a message with it lies from the retention floor on and was
// appended within the window.
type model struct {
	window, now, floor int64
	log                []modelMessage
}

type modelMessage struct {
	id, at, off int64
	hash        uint64
}

// answer returns the offsets of the messages that make id a duplicate now.
func (m *model) answer(id int64) []int64 {
	var out []int64
	for _, e := range m.log {
		if e.id == id && e.off >= m.floor && e.at >= m.now-m.window {
			out = append(out, e.off)
		}
	}
	return out
}

// confirm keeps the candidates a reading of the log confirms, as
// isDuplicate does.
func (m *model) confirm(d *Window, id int64, candidates []int64) []int64 {
	var out []int64
	for _, off := range candidates {
		i, ok := slices.BinarySearchFunc(m.log, off, func(e modelMessage, off int64) int { return int(e.off - off) })
		if !ok {
			panic("a candidate points at no message")
		}
		if e := m.log[i]; e.id == id && d.Within(e.at, m.now) {
			out = append(out, off)
		}
	}
	return out
}

// rebuild builds the window from the log as load does: every message from
// the oldest offset the window names (and from the floor), expired at now.
func (m *model) rebuild(d *Window) *Window {
	r := NewWindow(m.window)
	if from := d.Oldest(); from >= 0 {
		for _, e := range m.log {
			if e.off >= max(from, m.floor) {
				r.AddHash(e.hash, e.at, e.off)
			}
		}
		r.Expire(m.now)
	}
	return r
}

// modelHash makes full hash and fingerprint collisions frequent: a third
// of the ids share four hashes, a third share one fingerprint (with five
// start slots), and the rest hash apart.
func modelHash(id int64) uint64 {
	switch id % 3 {
	case 0:
		return uint64(id % 4)
	case 1:
		return unmixHash(uint64(id%5)<<60 | uint64(id)<<30 | 7)
	}
	return uint64(id) * 0x9e3779b97f4a7c15
}

// FuzzDedupAgainstModel drives dedup and the model with the same appends,
// expiries, retention cuts and rebuilds, and checks after each step that
// every id is answered alike by the window (its candidates confirmed by the
// log), by the model, and by a window rebuilt from the log.
func FuzzDedupAgainstModel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 50, 0, 1, 2, 3, 3, 0, 1, 200, 0, 1})
	f.Add([]byte{5, 0, 1, 0, 2, 0, 3, 1, 9, 0, 1, 2, 1, 3, 0, 4, 1, 255, 0, 5})
	f.Add([]byte{40, 0, 7, 0, 7, 4, 0, 1, 30, 0, 7, 2, 4, 3, 0, 0, 8, 1, 31, 0, 7})
	seed := make([]byte, 0, 400)
	for i := range 200 {
		seed = append(seed, byte(i%4), byte(i*7))
	}
	f.Add(seed)
	const ids = 40
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) < 1 {
			return
		}
		m := &model{window: int64(ops[0]), now: 1000}
		d := NewWindow(m.window)
		next := int64(0) // the message log's end
		check := func(step int) {
			for id := range int64(ids) {
				want := m.answer(id)
				if len(want) > 1 {
					t.Fatalf("step %d: the model holds id %d twice within the window", step, id)
				}
				got := m.confirm(d, id, d.LookupHash(modelHash(id)))
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: id %d answered %v, the model %v", step, id, got, want)
				}
			}
			if o := d.Oldest(); o != -1 && (o < m.floor || o >= next) {
				t.Fatalf("step %d: oldest %d outside [%d, %d)", step, o, m.floor, next)
			}
		}
		for i := 1; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%5, int64(ops[i+1])
			switch op {
			case 0, 1: // append id arg (an apply: expire, look up, add if new)
				d.Expire(m.now)
				id := arg % ids
				if len(m.confirm(d, id, d.LookupHash(modelHash(id)))) == 0 {
					if op == 1 && arg > 200 {
						next += maxRel // cross a table's reach now and then
					}
					e := modelMessage{id: id, at: m.now, off: next, hash: modelHash(id)}
					m.log = append(m.log, e)
					d.AddHash(e.hash, e.at, e.off)
					next += 1 + arg%7
				}
			case 2: // time passes
				m.now += arg
			case 3: // retention cuts the log
				if n := len(m.log); n > 0 {
					cut := m.log[int(arg)%n].off + arg%2 // a message's offset, or just past it
					if cut > m.floor {
						m.floor = cut
						d.ForgetBefore(cut)
					}
				}
			case 4: // a restart: the window is rebuilt from the log
				d = m.rebuild(d)
			}
			check(i)
			r := m.rebuild(d)
			for id := range int64(ids) {
				a := m.confirm(d, id, d.LookupHash(modelHash(id)))
				b := m.confirm(r, id, r.LookupHash(modelHash(id)))
				if !slices.Equal(a, b) {
					t.Fatalf("step %d: id %d answered %v, by the rebuilt window %v", i, id, a, b)
				}
			}
		}
	})
}
