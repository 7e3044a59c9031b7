package fsm

import (
	"container/heap"
	"strings"
)

// The dead letters' fair share. At the broker group's bound of dead letters
// (maxDeadTotal) room for a new one comes from the application whose
// consumer groups hold the most (ties: the first code in byte order), and
// from its consumer group holding the most (ties: the first by subject,
// then name): one application's failing groups then push out only their
// own dead letters once they hold more than another's, never the other's
// below an equal share. Groups of no application (authentication off, or
// created by a node) share as one, "". The shares are derived from the
// groups (rebuilt on open) and kept as their dead letters change
// (recountDead), so a pick costs a look at each application, not at every
// group.

// deadShare is one application's dead letters: how many its groups hold,
// and its groups holding any, as a heap whose top holds the most.
type deadShare struct {
	count  int64
	groups deadHeap
}

// deadHeap orders groups by dead letters held, most first, then by key.
type deadHeap []*group

func (h deadHeap) Len() int { return len(h) }
func (h deadHeap) Less(i, j int) bool {
	if a, b := len(h[i].dead), len(h[j].dead); a != b {
		return a > b
	}
	return h[i].key.less(h[j].key)
}
func (h deadHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].deadAt, h[j].deadAt = i, j
}
func (h *deadHeap) Push(x any) {
	g := x.(*group)
	g.deadAt = len(*h)
	*h = append(*h, g)
}
func (h *deadHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.deadAt = -1
	return g
}

func (k groupKey) less(o groupKey) bool {
	if c := strings.Compare(k.subject, o.subject); c != 0 {
		return c < 0
	}
	return k.group < o.group
}

// recountDead records that g's dead letters changed from before to what it
// holds now (both 0 for a group leaving the state: then before is what it
// held and gone says so).
func (s *state) recountDead(g *group, before int, gone bool) {
	now := len(g.dead)
	if gone {
		now = 0
	}
	s.deadTotal += int64(now - before)
	share := s.deadShares[g.app]
	if share == nil {
		if now == 0 {
			return
		}
		share = &deadShare{}
		s.deadShares[g.app] = share
	}
	share.count += int64(now - before)
	switch {
	case g.deadAt >= 0 && now == 0:
		heap.Remove(&share.groups, g.deadAt)
	case g.deadAt >= 0:
		heap.Fix(&share.groups, g.deadAt)
	case now > 0:
		heap.Push(&share.groups, g)
	}
	if share.count == 0 {
		delete(s.deadShares, g.app)
	}
}

// deadVictim returns the group whose oldest dead letter goes to make room
// at the broker group's bound: the top group of the application holding
// the most; nil if no group holds any.
func (s *state) deadVictim() *group {
	var top string
	var most *deadShare
	for app, share := range s.deadShares {
		if most == nil || share.count > most.count || share.count == most.count && app < top {
			top, most = app, share
		}
	}
	if most == nil {
		return nil
	}
	return most.groups[0]
}
