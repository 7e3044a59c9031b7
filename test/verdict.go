package test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// verdict repeats at the very end of a failed test's output what it
// found: the clusters' cleanups log the last lines of every node's log
// after the failure (hundreds of lines for nine nodes), and a reader of
// a long output's tail, or of a CI log cut short, looks there. Made
// before the test's clusters, so that its cleanup runs after theirs.
type verdict struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

// newVerdict returns the verdict of t; on failure, its last line begins
// with title.
func newVerdict(t *testing.T, title string) *verdict {
	v := &verdict{t: t}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		found := "no finding recorded: the failure is logged above the nodes' logs"
		if len(v.lines) > 0 {
			found = strings.Join(v.lines, "\n")
		}
		t.Logf("%s: FAILED; what it found:\n%s", title, found)
	})
	return v
}

// Logf logs a finding, and keeps it for the end.
func (v *verdict) Logf(format string, args ...any) {
	v.t.Helper()
	v.add(fmt.Sprintf(format, args...))
	v.t.Logf(format, args...)
}

// Fatalf fails the test with a finding, kept for the end.
func (v *verdict) Fatalf(format string, args ...any) {
	v.t.Helper()
	v.add(fmt.Sprintf(format, args...))
	v.t.Fatalf(format, args...)
}

func (v *verdict) add(line string) {
	v.mu.Lock()
	v.lines = append(v.lines, line)
	v.mu.Unlock()
}
