package test

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq"
)

// History records what a run's clients did and saw: every send with its
// outcome (and whether its producer chose its id), every delivery to every
// consumer group (acknowledged, or failed by its handler), the dead
// letters of groups that fail messages, when each broadcast consumer and
// each group that starts at the latest message joined, the backlogs an
// at-most-once group drained with no fault in flight (Drained), and the
// bursts a group with slow handlers worked through (Paced). The checker
// reads it once the run is over. Safe for concurrent use.
type History struct {
	mu        sync.Mutex
	sends     map[string]*sendRecord            // by message id
	delivered map[string]map[string][]time.Time // consumer group → id → times of deliveries the handler acknowledged
	// from records, for each delivery in delivered, the broker group it
	// came from: a send that a producer's retry stored in two broker
	// groups (dedup is per broker group) is two messages to a consumer
	// group, each of which at-most-once hands out once.
	from   map[string]map[string][]string
	nacked map[string]map[string][]time.Time // consumer group → id → times of deliveries the handler failed
	dead   map[string]map[string]bool        // consumer group → ids of its dead letters
	joined map[string]map[string]time.Time   // broadcast or latest group → subject → when it joined
	bursts []burst                           // backlogs drained at most once (Drained)
	paced  []burst                           // bursts worked through by slow handlers (Paced)
	// acked lists the acknowledged sends in the order of their answers,
	// and pending the sends with no answer yet: with owing, they let a
	// poll of what is undelivered look at the sends answered since the
	// last one and those still owed, not at every send of the run (which
	// under the race detector held the lock long enough to starve the
	// handlers recording deliveries).
	// nAcked counts the sends whose outcome is an acknowledgement: acked
	// may list an id handed over again after its first answer twice.
	acked   []string
	nAcked  int
	pending map[string]struct{}
	owing   *owing
}

// owing is what the last call of UndeliveredBefore found still owed, for
// its expectations and time: the next call with the same ones re-checks
// only these, and the sends acknowledged since.
type owing struct {
	e      Expectations
	before time.Time
	next   int // h.acked[:next] were looked at
	ids    map[string]struct{}
}

// burst is a backlog a group drained: the ids sent into it, and whether
// no fault was in flight while it was drained.
type burst struct {
	group string
	ids   []string
	clean bool
}

type sendRecord struct {
	subject   string
	sendingAt time.Time // handed to the producer
	deliverAt time.Time // zero: at once
	chosen    bool      // the producer chose the id (Message.SetID)
	outcome   sendOutcome
}

// Expectations name the consumer groups of a run by what they promise.
type Expectations struct {
	// AtLeastOnce groups consume throughout the run: every acknowledged
	// send reaches each, acknowledged by its handler or, for a group whose
	// handler fails messages, kept as a dead letter (History.DeadLetters).
	AtLeastOnce []string
	// AtMostOnce groups never receive a message twice; they may miss some.
	AtMostOnce []string
	// Broadcast groups (one consumer's group of its own) receive every
	// acknowledged send of a subject handed to a producer after they
	// joined it (History.Joined); the checker fails a run in which one
	// never joined.
	Broadcast []string
	// Latest groups start at the latest message and subscribe once
	// sending is under way: each receives every acknowledged send of a
	// subject handed to a producer after its Subscribe returned
	// (History.Joined); the checker fails a run in which one never joined.
	Latest []string
	// Subjects names, for a group that consumes only some subjects, those
	// it consumes: it is owed (or misses) only their sends. A group not
	// named consumes every subject.
	Subjects map[string][]string
}

func (e Expectations) all() []string {
	return slices.Concat(e.AtLeastOnce, e.AtMostOnce, e.Broadcast, e.Latest)
}

// fromJoin lists the groups owed only what was sent after they joined.
func (e Expectations) fromJoin() []string {
	return slices.Concat(e.Broadcast, e.Latest)
}

// consumes says whether group consumes subject.
func (e Expectations) consumes(group, subject string) bool {
	only, ok := e.Subjects[group]
	return !ok || slices.Contains(only, subject)
}

type sendOutcome uint8

const (
	sendPending sendOutcome = iota // no answer yet
	sendAcked                      // acknowledged: stored on a quorum
	sendUnknown                    // the producer gave up (a timeout, a broker down): may or may not be stored
)

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{sends: map[string]*sendRecord{}, delivered: map[string]map[string][]time.Time{}, from: map[string]map[string][]string{},
		nacked: map[string]map[string][]time.Time{}, dead: map[string]map[string]bool{}, joined: map[string]map[string]time.Time{},
		pending: map[string]struct{}{}}
}

// Sending records a message about to be handed to a producer.
func (h *History) Sending(m *qmq.Message) { h.sending(m, false) }

// SendingChosen records a message whose id its producer chose
// (Message.SetID), about to be handed to a producer once: the checker
// fails a run in which it was stored in two broker groups.
func (h *History) SendingChosen(m *qmq.Message) { h.sending(m, true) }

func (h *History) sending(m *qmq.Message, chosen bool) {
	h.mu.Lock()
	if r := h.sends[m.ID()]; r != nil && r.outcome == sendAcked {
		h.nAcked-- // handed over again: this hand-over's answer counts
	}
	h.sends[m.ID()] = &sendRecord{subject: m.Subject(), sendingAt: time.Now(), deliverAt: m.DeliverAt(), chosen: chosen}
	h.pending[m.ID()] = struct{}{}
	h.mu.Unlock()
}

// Sent records a send's outcome: err nil is an acknowledgement.
func (h *History) Sent(m *qmq.Message, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.sends[m.ID()]
	delete(h.pending, m.ID())
	switch {
	case err == nil && r.outcome != sendAcked:
		h.acked = append(h.acked, m.ID())
		h.nAcked++
		r.outcome = sendAcked
	case err != nil:
		if r.outcome == sendAcked {
			h.nAcked--
		}
		r.outcome = sendUnknown
	}
}

// AckedCount returns how many sends were acknowledged so far.
func (h *History) AckedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nAcked
}

// Delivered records that consumer group received m at time at, and its
// handler acknowledged it.
func (h *History) Delivered(group string, m *qmq.Message, at time.Time) {
	h.DeliveredFrom(group, m.BrokerGroup(), m, at)
}

// DeliveredFrom is Delivered of a message stored in brokerGroup.
func (h *History) DeliveredFrom(group, brokerGroup string, m *qmq.Message, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	addTime(h.delivered, group, m.ID(), at)
	if h.from[group] == nil {
		h.from[group] = map[string][]string{}
	}
	h.from[group][m.ID()] = append(h.from[group][m.ID()], brokerGroup)
}

// Nacked records that consumer group received m at time at, and its
// handler failed it (a nack: it comes again, or becomes a dead letter).
func (h *History) Nacked(group string, m *qmq.Message, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	addTime(h.nacked, group, m.ID(), at)
}

func addTime(m map[string]map[string][]time.Time, group, id string, at time.Time) {
	g := m[group]
	if g == nil {
		g = map[string][]time.Time{}
		m[group] = g
	}
	g[id] = append(g[id], at)
}

// DeadLetters records that consumer group keeps the messages ids as dead
// letters (read with the admin).
func (h *History) DeadLetters(group string, ids []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.dead[group]
	if g == nil {
		g = map[string]bool{}
		h.dead[group] = g
	}
	for _, id := range ids {
		g[id] = true
	}
}

// Joined records that a broadcast group, or one at the latest message, was
// consuming subject from time at on: every message of subject handed to a
// producer later must reach it.
func (h *History) Joined(group, subject string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.joined[group]
	if g == nil {
		g = map[string]time.Time{}
		h.joined[group] = g
	}
	g[subject] = at
	h.owing = nil // sends looked at before may be owed to it now
}

// Drained records that at-most-once group drained a backlog into which
// the sends ids went (each recorded with Sending and Sent), and whether
// no fault was in flight at any moment of the drain (clean). The checker
// requires every acknowledged send of a clean drain delivered: at most
// once may miss a message only when a consumer, its connection or a
// broker dies while the message is on its way, and with nothing failing
// a backlog larger than a pull reply must still arrive whole. A drain
// with a fault in flight is only counted.
func (h *History) Drained(group string, ids []string, clean bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.bursts = append(h.bursts, burst{group: group, ids: slices.Clone(ids), clean: clean})
}

// Paced records that group, whose handlers take longer than their share
// of its ack wait (the wait over the messages a pull could hand them),
// worked through a burst into which the sends ids went, and whether no
// fault was in flight meanwhile (clean). The checker requires each
// acknowledged send of a clean burst handled exactly once: with nothing
// failing, a message expires only by waiting in the client for a worker
// past its ack wait, and is then handled twice.
func (h *History) Paced(group string, ids []string, clean bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.paced = append(h.paced, burst{group: group, ids: slices.Clone(ids), clean: clean})
}

// owed reports whether group has yet to receive the acknowledged send s of
// id: an at-least-once group until its handler acknowledged it or keeps
// it as a dead letter, a broadcast or latest group (fromJoin) only for
// sends begun after it joined their subject. Called with h.mu held.
func (h *History) owed(e Expectations, group string, fromJoin bool, id string, s *sendRecord) bool {
	if !e.consumes(group, s.subject) {
		return false
	}
	if fromJoin {
		at, ok := h.joined[group][s.subject]
		if !ok || !s.sendingAt.After(at) {
			return false
		}
	}
	return len(h.delivered[group][id]) == 0 && !h.dead[group][id]
}

// Undelivered returns how many acknowledged sends some at-least-once,
// broadcast or latest group of e has not received yet.
func (h *History) Undelivered(e Expectations) int {
	n, _ := h.UndeliveredBefore(e, time.Time{})
	return n
}

// UndeliveredBefore returns how many acknowledged sends handed to a
// producer before t (any time, if t is zero) some at-least-once,
// broadcast or latest group of e has not received yet, and how many sends handed
// over before t have no outcome yet (a pending one may still be stored).
func (h *History) UndeliveredBefore(e Expectations, t time.Time) (undelivered, pending int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := h.owing
	if w == nil || !w.before.Equal(t) || !reflect.DeepEqual(w.e, e) {
		w = &owing{e: e, before: t, ids: map[string]struct{}{}}
		h.owing = w
	}
	// What was delivered stays delivered: a send found not owed is never
	// owed again (but to a group that joins later: Joined starts over).
	for _, id := range h.acked[w.next:] {
		if r := h.sends[id]; r.outcome == sendAcked && (t.IsZero() || r.sendingAt.Before(t)) && h.owedAnywhere(e, id, r) {
			w.ids[id] = struct{}{}
		}
	}
	w.next = len(h.acked)
	for id := range w.ids {
		if r := h.sends[id]; r.outcome != sendAcked || !h.owedAnywhere(e, id, r) {
			delete(w.ids, id)
		}
	}
	for id := range h.pending {
		if t.IsZero() || h.sends[id].sendingAt.Before(t) {
			pending++
		}
	}
	return len(w.ids), pending
}

// owedAnywhere reports whether some at-least-once, broadcast or latest
// group of e has yet to receive the acknowledged send s of id. Called with
// h.mu held.
func (h *History) owedAnywhere(e Expectations, id string, s *sendRecord) bool {
	for _, g := range e.AtLeastOnce {
		if h.owed(e, g, false, id, s) {
			return true
		}
	}
	for _, g := range e.fromJoin() {
		if h.owed(e, g, true, id, s) {
			return true
		}
	}
	return false
}

// seen returns when group's handlers acknowledged id, and when they
// failed it.
func (h *History) seen(group, id string) (delivered, nacked []time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.delivered[group][id]), slices.Clone(h.nacked[group][id])
}

// deliveredOf returns how many of the acknowledged sends ids group
// received, and how many were acknowledged.
func (h *History) deliveredOf(group string, ids []string) (got, acked int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		if s := h.sends[id]; s != nil && s.outcome == sendAcked {
			acked++
			if len(h.delivered[group][id]) > 0 {
				got++
			}
		}
	}
	return got, acked
}

// Report is what the checker found in a history.
type Report struct {
	Sent, Acked, Unknown int
	// Lost: acknowledged, and never delivered to (nor dead-lettered by) a
	// group that consumed all along, or to a broadcast or latest group
	// that had joined before the send began. Must be empty.
	Lost []string
	// LostWhere counts the lost by consumer group, subject, broker group
	// (where another consumer group received the send from; "none" if no
	// group did) and whether the send was delayed: where to look first.
	LostWhere map[string]int
	// Split: a send whose id its producer chose, delivered from two broker
	// groups: one send stored twice. Must be empty.
	Split []string
	// Twice: delivered more than once to an at-most-once group. Must be
	// empty.
	Twice []string
	// NotJoined: broadcast or latest groups that never joined a subject.
	// Must be empty.
	NotJoined []string
	// Unexpected: delivered, never sent. Must be empty.
	Unexpected []string
	// Early: a delayed message delivered before its delivery time. Must be
	// empty.
	Early []string
	// Recovered: sends whose producer gave up that were delivered anyway.
	Recovered int
	// Duplicated counts, per group, the deliveries beyond the first of a
	// message: at-least-once allows them, around failures.
	Duplicated map[string]int
	// Delayed counts the delayed messages acknowledged.
	Delayed int
	// Nacked counts, per group, the deliveries its handler failed;
	// DeadLettered, the dead letters it keeps.
	Nacked, DeadLettered map[string]int
	// Missed counts, per at-most-once group, the acknowledged sends it
	// never received: at-most-once allows it, around failures.
	Missed map[string]int
	// Copies counts, per at-most-once group, the sends it received from
	// two broker groups: stored twice by a producer's retry, each copy
	// handed out once.
	Copies map[string]int
	// Incomplete: acknowledged sends of a backlog an at-most-once group
	// drained with no fault in flight (History.Drained) that it never
	// received. Must be empty.
	Incomplete []string
	// Bursts counts, per at-most-once group, the backlogs it drained;
	// CleanBursts those drained with no fault in flight, each required
	// whole.
	Bursts, CleanBursts map[string]int
	// Expired: acknowledged sends of a burst worked through by slow
	// handlers with no fault in flight (History.Paced) that a handler got
	// other than once. Must be empty.
	Expired []string
	// Paced counts, per group, the bursts its slow handlers worked
	// through; CleanPaced those with no fault in flight, each required
	// handled once.
	Paced, CleanPaced map[string]int
}

// Check checks the history against e.
func (h *History) Check(e Expectations) Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{Sent: len(h.sends), LostWhere: map[string]int{}, Duplicated: map[string]int{}, Nacked: map[string]int{}, DeadLettered: map[string]int{},
		Missed: map[string]int{}, Copies: map[string]int{}, Bursts: map[string]int{}, CleanBursts: map[string]int{},
		Paced: map[string]int{}, CleanPaced: map[string]int{}}
	for _, g := range e.fromJoin() {
		if len(h.joined[g]) == 0 {
			r.NotJoined = append(r.NotJoined, g)
		}
	}
	for id, s := range h.sends {
		switch s.outcome {
		case sendAcked:
			r.Acked++
			if !s.deliverAt.IsZero() {
				r.Delayed++
			}
			for _, g := range e.AtLeastOnce {
				if h.owed(e, g, false, id, s) {
					r.lost(h, g, id, s)
				}
			}
			for _, g := range e.fromJoin() {
				if h.owed(e, g, true, id, s) {
					r.lost(h, g, id, s)
				}
			}
			for _, g := range e.AtMostOnce {
				if e.consumes(g, s.subject) && len(h.delivered[g][id]) == 0 {
					r.Missed[g]++
				}
			}
		case sendUnknown, sendPending:
			r.Unknown++
			for _, g := range e.all() {
				if len(h.delivered[g][id]) > 0 {
					r.Recovered++
					break
				}
			}
		}
	}
	stored := map[string]map[string]bool{} // chosen id → broker groups any group got it from
	for _, byID := range h.from {
		for id, from := range byID {
			if s := h.sends[id]; s != nil && s.chosen {
				if stored[id] == nil {
					stored[id] = map[string]bool{}
				}
				for _, bg := range from {
					stored[id][bg] = true
				}
			}
		}
	}
	for id, in := range stored {
		if len(in) > 1 {
			r.Split = append(r.Split, fmt.Sprintf("%s (delivered from broker groups %s)", id, strings.Join(slices.Sorted(maps.Keys(in)), ", ")))
		}
	}
	for g, byID := range h.delivered {
		amo := slices.Contains(e.AtMostOnce, g)
		for id, times := range byID {
			r.Duplicated[g] += len(times) - 1
			if !amo || len(times) < 2 {
				continue
			}
			seen := map[string]int{}
			for _, bg := range h.from[g][id] {
				if seen[bg]++; seen[bg] == 2 {
					r.Twice = append(r.Twice, fmt.Sprintf("%s:%s (from broker group %s more than once)", g, id, bg))
				}
			}
			if len(seen) > 1 {
				r.Copies[g]++
			}
		}
	}
	for _, deliveries := range []map[string]map[string][]time.Time{h.delivered, h.nacked} {
		for g, byID := range deliveries {
			for id, times := range byID {
				s := h.sends[id]
				if s == nil {
					r.Unexpected = append(r.Unexpected, g+":"+id)
					continue
				}
				for _, at := range times {
					// Delivery times are stored to the millisecond.
					if at.Before(s.deliverAt.Truncate(time.Millisecond)) {
						r.Early = append(r.Early, fmt.Sprintf("%s:%s due %s, delivered %s", g, id,
							s.deliverAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano)))
					}
				}
			}
		}
	}
	for i, b := range h.bursts {
		r.Bursts[b.group]++
		if !b.clean {
			continue
		}
		r.CleanBursts[b.group]++
		for _, id := range b.ids {
			if s := h.sends[id]; s != nil && s.outcome == sendAcked && len(h.delivered[b.group][id]) == 0 {
				r.Incomplete = append(r.Incomplete, fmt.Sprintf("%s:%s (backlog %d, drained with no fault in flight)", b.group, id, i+1))
			}
		}
	}
	for i, b := range h.paced {
		r.Paced[b.group]++
		if !b.clean {
			continue
		}
		r.CleanPaced[b.group]++
		for _, id := range b.ids {
			s := h.sends[id]
			if calls := len(h.delivered[b.group][id]) + len(h.nacked[b.group][id]); s != nil && s.outcome == sendAcked && calls != 1 {
				r.Expired = append(r.Expired, fmt.Sprintf("%s:%s (burst %d, handled %d times with no fault in flight)", b.group, id, i+1, calls))
			}
		}
	}
	for g, byID := range h.nacked {
		for _, times := range byID {
			r.Nacked[g] += len(times)
		}
	}
	for g, ids := range h.dead {
		r.DeadLettered[g] = len(ids)
		for id := range ids {
			if h.sends[id] == nil {
				r.Unexpected = append(r.Unexpected, g+" dead letter:"+id)
			}
		}
	}
	sort.Strings(r.Lost)
	sort.Strings(r.Split)
	sort.Strings(r.Expired)
	sort.Strings(r.Twice)
	sort.Strings(r.Unexpected)
	sort.Strings(r.Early)
	sort.Strings(r.Incomplete)
	return r
}

// lost records that group never received the acknowledged send s of id.
// Called with h.mu held.
func (r *Report) lost(h *History, group, id string, s *sendRecord) {
	r.Lost = append(r.Lost, group+":"+id)
	stored := "none"
	for _, g := range slices.Sorted(maps.Keys(h.from)) {
		if from := h.from[g][id]; len(from) > 0 {
			stored = from[0]
			break
		}
	}
	kind := "at once"
	if !s.deliverAt.IsZero() {
		kind = "delayed"
	}
	r.LostWhere[fmt.Sprintf("group %s, subject %s, broker group %s, %s", group, s.subject, stored, kind)]++
}

// OK reports whether the history keeps every promise: nothing lost,
// nothing unexpected, nothing early, nothing twice to an at-most-once
// group, no chosen id stored in two broker groups, every backlog drained
// with no fault in flight whole, every burst worked through by slow
// handlers with no fault in flight handled once, every broadcast and
// latest group joined.
func (r Report) OK() bool {
	return len(r.Lost)+len(r.Split)+len(r.Unexpected)+len(r.Early)+len(r.Twice)+len(r.NotJoined)+len(r.Incomplete)+len(r.Expired) == 0
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, acknowledged %d (%d delayed), outcome unknown %d (%d of them delivered anyway); ",
		r.Sent, r.Acked, r.Delayed, r.Unknown, r.Recovered)
	fmt.Fprintf(&b, "lost %d, chosen ids stored in two broker groups %d, unexpected %d, early %d, twice to an at-most-once group %d, "+
		"missing from a backlog drained at most once with no fault in flight %d, handled other than once by slow handlers with no fault in flight %d, "+
		"groups not joined %d; ",
		len(r.Lost), len(r.Split), len(r.Unexpected), len(r.Early), len(r.Twice), len(r.Incomplete), len(r.Expired), len(r.NotJoined))
	fmt.Fprintf(&b, "duplicated %v, nacked %v, dead letters %v, at-most-once copies from two broker groups %v, missed by at-most-once %v, "+
		"backlogs drained at most once %v (with no fault in flight, so required whole: %v), "+
		"bursts worked through by slow handlers %v (with no fault in flight, so required handled once: %v)",
		r.Duplicated, r.Nacked, r.DeadLettered, r.Copies, r.Missed, r.Bursts, r.CleanBursts, r.Paced, r.CleanPaced)
	for _, where := range slices.Sorted(maps.Keys(r.LostWhere)) {
		fmt.Fprintf(&b, "\nlost: %d of %s", r.LostWhere[where], where)
	}
	for _, list := range []struct {
		name string
		ids  []string
	}{{"lost", r.Lost}, {"split", r.Split}, {"unexpected", r.Unexpected}, {"early", r.Early}, {"twice", r.Twice},
		{"incomplete", r.Incomplete}, {"expired", r.Expired}, {"not joined", r.NotJoined}} {
		if len(list.ids) > 0 {
			fmt.Fprintf(&b, "\n%s (first %d): %s", list.name, min(len(list.ids), 10), strings.Join(list.ids[:min(len(list.ids), 10)], ", "))
		}
	}
	return b.String()
}
