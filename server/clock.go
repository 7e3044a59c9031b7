package server

import (
	"sync"
	"time"
)

// termClock is the time a leader stamps into commands and fires delayed
// messages by: the configured clock (Config.Now), but never ahead of where
// that clock stood when the term began plus the monotonic time elapsed
// since. A wall clock that jumps forward while the node leads therefore
// stamps nothing and fires nothing early; one that jumps back makes
// deliveries late, never early. A clock already wrong when the term begins
// is not caught.
type termClock struct {
	wall func() time.Time

	mu         sync.Mutex
	anchorWall time.Time // the wall clock when the term began
	anchorMono time.Time // time.Now() then, for its monotonic reading
}

// start anchors the clock at the beginning of a term.
func (c *termClock) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.anchorWall, c.anchorMono = c.wall().Round(0), time.Now()
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
