package test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/qmqgo/qmq"
)

// History records what a run's clients did and saw: every send with its
// outcome, and every delivery to every consumer group. The checker reads
// it once the run is over. Safe for concurrent use.
type History struct {
	mu        sync.Mutex
	sends     map[string]*sendRecord            // by message id
	delivered map[string]map[string][]time.Time // consumer group → id → receipt times
}

type sendRecord struct {
	subject   string
	deliverAt time.Time // zero: at once
	outcome   sendOutcome
}

type sendOutcome uint8

const (
	sendPending sendOutcome = iota // no answer yet
	sendAcked                      // acknowledged: stored on a quorum
	sendUnknown                    // the producer gave up (a timeout, a broker down): may or may not be stored
)

// NewHistory returns an empty history.
func NewHistory() *History {
	return &History{sends: map[string]*sendRecord{}, delivered: map[string]map[string][]time.Time{}}
}

// Sending records a message about to be handed to a producer.
func (h *History) Sending(m *qmq.Message) {
	h.mu.Lock()
	h.sends[m.ID()] = &sendRecord{subject: m.Subject(), deliverAt: m.DeliverAt()}
	h.mu.Unlock()
}

// Sent records a send's outcome: err nil is an acknowledgement.
func (h *History) Sent(m *qmq.Message, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.sends[m.ID()]
	if err == nil {
		r.outcome = sendAcked
	} else {
		r.outcome = sendUnknown
	}
}

// Delivered records that consumer group received m at time at.
func (h *History) Delivered(group string, m *qmq.Message, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.delivered[group]
	if g == nil {
		g = map[string][]time.Time{}
		h.delivered[group] = g
	}
	g[m.ID()] = append(g[m.ID()], at)
}

// Undelivered returns how many acknowledged sends some consumer group of
// groups has not received yet.
func (h *History) Undelivered(groups []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for id, r := range h.sends {
		if r.outcome != sendAcked {
			continue
		}
		for _, g := range groups {
			if len(h.delivered[g][id]) == 0 {
				n++
				break
			}
		}
	}
	return n
}

// Report is what the checker found in a history.
type Report struct {
	Sent, Acked, Unknown int
	// Lost: acknowledged, and never delivered to a group that consumed all
	// along. Must be empty.
	Lost []string
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
}

// Check checks the history; groups are the consumer groups that consumed
// throughout the run.
func (h *History) Check(groups []string) Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := Report{Sent: len(h.sends), Duplicated: map[string]int{}}
	for id, s := range h.sends {
		switch s.outcome {
		case sendAcked:
			r.Acked++
			if !s.deliverAt.IsZero() {
				r.Delayed++
			}
			for _, g := range groups {
				if len(h.delivered[g][id]) == 0 {
					r.Lost = append(r.Lost, g+":"+id)
				}
			}
		case sendUnknown, sendPending:
			r.Unknown++
			for _, g := range groups {
				if len(h.delivered[g][id]) > 0 {
					r.Recovered++
					break
				}
			}
		}
	}
	for g, byID := range h.delivered {
		for id, times := range byID {
			s := h.sends[id]
			if s == nil {
				r.Unexpected = append(r.Unexpected, g+":"+id)
				continue
			}
			r.Duplicated[g] += len(times) - 1
			for _, at := range times {
				// Delivery times are stored to the millisecond.
				if at.Before(s.deliverAt.Truncate(time.Millisecond)) {
					r.Early = append(r.Early, fmt.Sprintf("%s:%s due %s, delivered %s", g, id,
						s.deliverAt.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano)))
				}
			}
		}
	}
	sort.Strings(r.Lost)
	sort.Strings(r.Unexpected)
	sort.Strings(r.Early)
	return r
}

// OK reports whether the history keeps every promise: nothing lost,
// nothing unexpected, nothing early.
func (r Report) OK() bool { return len(r.Lost)+len(r.Unexpected)+len(r.Early) == 0 }

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sent %d, acknowledged %d (%d delayed), outcome unknown %d (%d of them delivered anyway); ",
		r.Sent, r.Acked, r.Delayed, r.Unknown, r.Recovered)
	fmt.Fprintf(&b, "lost %d, unexpected %d, early %d, duplicated %v", len(r.Lost), len(r.Unexpected), len(r.Early), r.Duplicated)
	for _, list := range []struct {
		name string
		ids  []string
	}{{"lost", r.Lost}, {"unexpected", r.Unexpected}, {"early", r.Early}} {
		if len(list.ids) > 0 {
			fmt.Fprintf(&b, "\n%s (first %d): %s", list.name, min(len(list.ids), 10), strings.Join(list.ids[:min(len(list.ids), 10)], ", "))
		}
	}
	return b.String()
}
