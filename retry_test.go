package qmq

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A nack's retry time is never before the time asked for: the wire carries
// milliseconds, so a time between two is rounded up, never down.
func TestRetryTimeRoundsUp(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000).Add(300 * time.Microsecond)
	for _, tc := range []struct {
		name string
		e    *RetryError
		want time.Time
	}{
		{"group backoff", nil, time.Time{}},
		{"after, between milliseconds", RetryAfter(time.Second), time.UnixMilli(1_700_000_001_001)},
		{"after 0: at once", RetryAfter(0), time.UnixMilli(1_700_000_000_001)},
		{"after a negative duration: at once", RetryAfter(-time.Hour), time.UnixMilli(1_700_000_000_001)},
		{"at a whole millisecond", RetryAt(time.UnixMilli(1_700_000_005_000)), time.UnixMilli(1_700_000_005_000)},
		{"at just past one", RetryAt(time.UnixMilli(1_700_000_005_000).Add(time.Nanosecond)), time.UnixMilli(1_700_000_005_001)},
		{"at the zero time: at once, not the group backoff", &RetryError{}, time.UnixMilli(1_700_000_000_001)},
		{"at before the epoch", RetryAt(time.UnixMilli(-5)), time.UnixMilli(1)},
	} {
		got := tc.e.retryAt(now)
		if !got.Equal(tc.want) {
			t.Errorf("%s: retry at %s, want %s", tc.name, got, tc.want)
		}
		wantMs := int64(0) // the wire's "the group's backoff"
		if !tc.want.IsZero() {
			wantMs = tc.want.UnixMilli()
		}
		if o := nackSettlement(tc.e, now); !o.nack || o.retryAt != wantMs {
			t.Errorf("%s: nack %+v, want retry at %d ms", tc.name, o, wantMs)
		}
	}
}

// A RetryError found through wrapping carries its time and its cause.
func TestRetryErrorWraps(t *testing.T) {
	cause := errors.New("downstream busy")
	err := fmt.Errorf("handle order: %w", &RetryError{After: time.Minute, Err: cause})
	var r *RetryError
	if !errors.As(err, &r) || r.After != time.Minute || !errors.Is(err, cause) {
		t.Fatalf("%v: RetryError %+v, cause found %v", err, r, errors.Is(err, cause))
	}
	if got, want := err.Error(), "handle order: qmq: retry after 1m0s: downstream busy"; got != want {
		t.Fatalf("error text %q, want %q", got, want)
	}
}
