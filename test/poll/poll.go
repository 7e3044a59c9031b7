// Package poll is for tests: it polls a condition until it holds, so that
// a test waits for what it needs rather than for a fixed time. (Production
// code that pauses, backing off or pacing, sleeps with internal/wait,
// which a cancelled context cuts short.)
package poll

import (
	"testing"
	"time"
)

// Until polls cond every 5 ms until it holds, failing the test if it does
// not within timeout; what says what was awaited.
func Until(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
