// Package lograte bounds how often a log line a client can provoke is
// written: a peer failing TLS handshakes in a loop must not fill the disk
// with one Warn per attempt.
package lograte

import (
	"sync"
	"time"
)

// Limiter allows one line per period and counts the ones it held back,
// so that the next line written can say how many there were. The zero
// value is not usable; use New. Safe for concurrent use.
type Limiter struct {
	period time.Duration
	now    func() time.Time // time.Now; tests replace it

	mu         sync.Mutex
	next       time.Time // when the next line may be written
	suppressed int       // lines held back since the last one written
}

// New returns a Limiter that allows one line per period.
func New(period time.Duration) *Limiter {
	return &Limiter{period: period, now: time.Now}
}

// Allow reports whether a line may be written now and, if so, how many
// were held back since the last one written (for a "suppressed" field).
func (l *Limiter) Allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	l.next = now.Add(l.period)
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}
