// Package lograte bounds how often a log line a client can provoke is
// written: a peer failing TLS handshakes in a loop must not fill the disk
// with one Warn per attempt.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows one line per period on average, up to burst at once,
// and counts the ones it held back, so that the next line written can say
// how many there were. The zero value is not usable; use New or NewBurst.
// Safe for concurrent use.
type Limiter struct {
	period time.Duration
	burst  int
	now    func() time.Time // time.Now; tests replace it

	mu         sync.Mutex
	credit     time.Duration // time earned towards lines, at most burst periods
	last       time.Time     // when credit was last counted; zero before the first line
	suppressed int           // lines held back since the last one written
}

// New returns a Limiter that allows one line per period.
func New(period time.Duration) *Limiter { return NewBurst(period, 1) }

// NewBurst returns a Limiter that allows burst lines at once, then one
// more each period: a burst of lines that each matter (an audit log's)
// is written whole, and a flood is held to one a period.
func NewBurst(period time.Duration, burst int) *Limiter {
	return &Limiter{period: period, burst: max(burst, 1), now: time.Now}
}

// Allow reports whether a line may be written now and, if so, how many
// were held back since the last one written (for a "suppressed" field).
func (l *Limiter) Allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	full := time.Duration(l.burst) * l.period
	if l.last.IsZero() {
		l.credit = full
	} else if d := now.Sub(l.last); d > 0 {
		l.credit = min(l.credit+d, full)
	}
	l.last = now
	if l.credit < l.period {
		l.suppressed++
		return false, 0
	}
	l.credit -= l.period
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
