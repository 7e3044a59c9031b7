// Package wait holds the one helper for pausing that respects
// cancellation: production loops that back off or pace sleep with it, and
// stop at once when their context ends. (Tests that wait for a condition
// poll it with test/poll.)
package wait

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
