package netns

import (
	"math/rand/v2"
	"time"
)

// Link is the model of one direction of the wire between two hosts. The
// zero Link delivers every packet at once, in order.
type Link struct {
	// Delay is the one-way delay of every packet: a round trip takes twice
	// it (plus the switch's own cost).
	Delay time.Duration
	// Jitter adds to each packet's delay a uniform random amount in
	// [-Jitter, +Jitter] (never below zero in all).
	Jitter time.Duration
	// Reorder lets a packet whose jitter is smaller than its predecessor's
	// overtake it; without it a packet never leaves before the one sent
	// before it on the link (jitter then bunches packets up instead).
	Reorder bool
	// Loss is the probability that a packet is dropped, from 0 to 1.
	Loss float64
	// Rate, if positive, caps the link at that many bytes a second: a
	// packet waits for the ones before it to be clocked out.
	Rate int64
	// Down drops every packet: the link is cut.
	Down bool
}

// lane is one direction of a link with its state: when the last packet
// arrives (for the order) and when the wire is free again (for the rate).
type lane struct {
	Link
	own        bool // set by SetLink: SetDefault leaves it
	last, free time.Time
}

// pass decides the fate of a packet of size bytes put on the lane at now:
// when it arrives, or ok false if it is dropped.
func (l *lane) pass(now time.Time, size int, rng *rand.Rand) (at time.Time, ok bool) {
	if l.Down || (l.Loss > 0 && rng.Float64() < l.Loss) {
		return time.Time{}, false
	}
	start := now
	if l.Rate > 0 {
		start = later(now, l.free)
		l.free = start.Add(time.Duration(int64(size) * int64(time.Second) / l.Rate))
		start = l.free
	}
	d := l.Delay
	if l.Jitter > 0 {
		d += time.Duration(rng.Int64N(int64(2*l.Jitter)+1)) - l.Jitter
	}
	at = start.Add(max(d, 0))
	if !l.Reorder {
		at = later(at, l.last)
	}
	l.last = later(at, l.last)
	return at, true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
