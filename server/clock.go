package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// termClock is the time a leader stamps into commands and fires delayed
// messages by: the configured clock (Config.Now), but never ahead of an
// anchor set when the term begins plus the monotonic time elapsed since.
// The anchor is the node's own wall clock, or, when that is ahead, a safe
// estimate of its group's clocks (see anchorClock): a clock already ahead
// when the node is elected, or one that jumps forward while it leads,
// therefore stamps nothing and fires nothing early; one that is behind or
// jumps back makes deliveries late, never early.
//
// Until the anchor is set for the node's current term the leader serves
// nothing time-dependent (see clockReady). Between terms, and before the
// next anchor is set, the previous anchor still bounds the clock.
type termClock struct {
	wall func() time.Time

	mu         sync.Mutex
	term       uint64        // the Raft term the anchor was set for; 0 before the first
	anchorWall time.Time     // the bound on the clock when the anchor was set
	anchorMono time.Time     // time.Now() then, for its monotonic reading
	anchored   chan struct{} // closed (and replaced) at every anchoring

	// offsetMs is the node's own wall clock minus its group's estimate at
	// the last anchoring, in milliseconds (positive: this node's ahead).
	offsetMs atomic.Int64
}

// anchor bounds the clock for term by wall as of mono (a time.Now()
// reading), and wakes whoever waits for the term's anchor.
func (c *termClock) anchor(term uint64, wall, mono time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.term, c.anchorWall, c.anchorMono = term, wall.Round(0), mono
	if c.anchored != nil {
		close(c.anchored)
	}
	c.anchored = make(chan struct{})
}

// anchoredFor reports whether the clock is anchored for term; if not, the
// channel returned is closed at the next anchoring.
func (c *termClock) anchoredFor(term uint64) (bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != 0 && c.term == term {
		return true, nil
	}
	if c.anchored == nil {
		c.anchored = make(chan struct{})
	}
	return false, c.anchored
}

// now returns the wall clock, held back to the anchor plus the monotonic
// time since it.
func (c *termClock) now() time.Time {
	w := c.wall().Round(0) // compare wall readings, not monotonic ones
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.anchorMono.IsZero() {
		return w
	}
	if limit := c.anchorWall.Add(time.Since(c.anchorMono)); w.After(limit) {
		return limit
	}
	return w
}

// offset returns the node's own clock minus its group's estimate at the
// last anchoring.
func (c *termClock) offset() time.Duration {
	return time.Duration(c.offsetMs.Load()) * time.Millisecond
}
