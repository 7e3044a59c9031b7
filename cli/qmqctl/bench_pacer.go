package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/qmqgo/qmq/internal/wait"
)

// maxBenchRate is the highest --rate accepted: far above what one client
// process sends, so that a typo (an extra zero or three) is refused rather
// than run as "as fast as possible".
const maxBenchRate = 10_000_000

// pacerCatchUp is how far behind its schedule a paced run may fall and
// still send at once to catch up: a sender later than this sends the
// messages of the last pacerCatchUp of the schedule back to back and
// forgets the rest (the schedule slips), so a stall never turns into a
// burst of more than pacerCatchUp × rate messages.
const pacerCatchUp = 10 * time.Millisecond

// pacer holds every producer of a run to one schedule: the k-th send of
// the run (from 0) is due rate⁻¹ × k after the start, whichever producer
// makes it. A sender that finds its slot in the future sleeps until then;
// one that finds it in the past sends at once, unless it is more than
// pacerCatchUp late: then the schedule slips so that the slot is exactly
// pacerCatchUp late, and the time it slipped is counted. Safe for
// concurrent use.
type pacer struct {
	start    time.Time
	interval float64 // nanoseconds between slots
	catchUp  float64 // nanoseconds

	mu      sync.Mutex
	next    float64 // the next slot, nanoseconds after start
	maxLate time.Duration
	slipped time.Duration
}

// checkRate validates a --rate in messages per second.
func checkRate(rate int64) error {
	if rate < 1 || rate > maxBenchRate {
		return fmt.Errorf("--rate %d: messages per second within 1..%d", rate, maxBenchRate)
	}
	return nil
}

// newPacer returns a schedule of rate sends a second (positive) from start.
func newPacer(rate float64, start time.Time) *pacer {
	return &pacer{start: start, interval: 1e9 / rate, catchUp: float64(pacerCatchUp)}
}

// slot takes the next slot of the schedule at now and returns when it is
// due (at or before now when the sender is behind).
func (p *pacer) slot(now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := float64(now.Sub(p.start))
	if late := at - p.next; late > p.catchUp {
		p.slipped += time.Duration(late - p.catchUp)
		p.next = at - p.catchUp
	}
	due := p.next
	p.next += p.interval
	if late := time.Duration(at - due); late > p.maxLate {
		p.maxLate = late
	}
	return p.start.Add(time.Duration(due))
}

// wait takes the next slot and sleeps until it is due; false if ctx ended
// first.
func (p *pacer) wait(ctx context.Context) bool {
	d := time.Until(p.slot(time.Now()))
	if d <= 0 {
		return ctx.Err() == nil
	}
	return wait.Sleep(ctx, d)
}

// behind returns the latest any send left after its slot (at most
// pacerCatchUp past which the schedule slips), and the total time the
// schedule slipped: the run sent about slipped × rate fewer messages than
// its schedule asked for.
func (p *pacer) behind() (maxLate, slipped time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.maxLate, p.slipped
}
