package server

import (
	"context"
	"sync"
	"time"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/wait"
)

// delayPoll is how often the leader asks its wheel what is due. The wheel
// is exact to the millisecond, so this, plus one Raft commit, is the
// lateness of a delivery.
const delayPoll = 10 * time.Millisecond

// scheduleInbox collects the entries the state machine schedules during
// one term of this node's leadership, for that term's wheel. The state
// machine adds to the current term's inbox on its apply goroutine, so add
// never blocks; between terms there is none, and entries go only to the
// schedule log (the next leader loads them from there). Each term has its
// own inbox, so a term's loop that is slow to stop never takes entries
// from the next.
type scheduleInbox struct {
	mu      sync.Mutex
	entries []delaywheel.Entry
}

func (b *scheduleInbox) add(e delaywheel.Entry) {
	b.mu.Lock()
	b.entries = append(b.entries, e)
	b.mu.Unlock()
}

// take returns what was collected since the last take.
func (b *scheduleInbox) take() []delaywheel.Entry {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.entries
	b.entries = nil
	return out
}

// scheduled hands an entry the state machine scheduled to the current
// term's inbox, if this node leads.
func (n *Node) scheduled(e delaywheel.Entry) {
	if b := n.inbox.Load(); b != nil {
		b.add(e)
	}
}

// scheduleSource reads hours of the schedule log for the wheel.
type scheduleSource struct{ f *fsm.FSM }

func (s scheduleSource) Load(hour int64, fn func(delaywheel.Entry) error) error {
	return s.f.LoadSchedule(hour, fn)
}

// runDelays is the leader's delay wheel for one term: it loads what is
// pending, then proposes a Fire for whatever is due, every delayPoll,
// until the term ends. A Fire that fails is tried again; one that
// committed without this node learning so is harmless to repeat.
func (n *Node) runDelays(ctx context.Context) {
	inbox := &scheduleInbox{}
	n.inbox.Store(inbox)
	defer n.inbox.CompareAndSwap(inbox, nil)
	// Apply everything earlier leaders committed first: the wheel must see
	// every entry they scheduled and every Fire they made.
	if !n.caughtUp(ctx) {
		return
	}
	for ctx.Err() == nil {
		err := n.fireDue(ctx, inbox)
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("delay wheel stopped; reloading it", "error", err)
		if !wait.Sleep(ctx, time.Second) {
			return
		}
	}
}

// fireDue builds a wheel from the schedule log and fires from it until ctx
// ends or the schedule cannot be read.
func (n *Node) fireDue(ctx context.Context, inbox *scheduleInbox) error {
	inbox.take() // the load below reads all of these
	start := time.Now()
	s, err := delaywheel.NewScheduler(scheduleSource{n.fsm}, n.clock.now().UnixMilli(), n.fsm.PendingHours())
	if err != nil {
		return err
	}
	n.log.Info("delay wheel loaded", "entries", s.Pending(), "took", time.Since(start).Round(time.Millisecond))
	tick := time.NewTicker(delayPoll)
	defer tick.Stop()
	var due []delaywheel.Entry
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if ctx.Err() != nil {
			return nil
		}
		for _, e := range inbox.take() {
			s.Add(e)
		}
		now := n.clock.now().UnixMilli()
		if due, err = s.Due(now, due[:0]); err != nil {
			return err
		}
		for len(due) > 0 && ctx.Err() == nil {
			batch := due[:fireBatch(due)]
			due = due[len(batch):]
			if !n.fire(ctx, now, batch) {
				// Due already: back into the current slot, for the next tick.
				for _, e := range batch {
					s.Add(e)
				}
				for _, e := range due {
					s.Add(e)
				}
				due = due[:0]
			}
		}
	}
}

// fireBatch returns how many of due go into one Fire: at most
// limits.MaxFireRefs, whose records come to at most limits.MaxFireBytes
// (and at least one).
func fireBatch(due []delaywheel.Entry) int {
	n, bytes := 0, int64(0)
	for n < len(due) && n < limits.MaxFireRefs && (n == 0 || bytes+int64(due[n].Size) <= limits.MaxFireBytes) {
		bytes += int64(due[n].Size)
		n++
	}
	return n
}

// fire proposes one Fire for entries due at now and reports whether it
// committed.
func (n *Node) fire(ctx context.Context, now int64, entries []delaywheel.Entry) bool {
	refs := make([]uint64, len(entries))
	for i, e := range entries {
		refs[i] = e.Ref
	}
	rctx, cancel := n.requestContext(ctx)
	defer cancel()
	resp, err := n.propose(rctx, (&fsm.Fire{Now: now, Refs: refs}).Encode())
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("fire failed; trying again", "entries", len(refs), "error", err)
		}
		return false
	}
	res := resp.(*fsm.FireResult)
	for _, subject := range res.Subjects {
		n.notify.kick(subject)
	}
	committed := n.clock.now()
	for _, e := range entries {
		n.metrics.delayLateness.Observe(committed.Sub(time.UnixMilli(e.At)).Seconds())
	}
	n.metrics.delaysFired.Add(float64(res.Fired))
	return true
}
