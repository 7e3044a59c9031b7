// Package disk reports how much space a file system has left, so that code
// about to write something large can refuse it up front, with a clear error,
// rather than fill the disk and fail halfway.
//
// Free asks the operating system; code that checks space takes a Probe, so
// that tests can pretend the disk is full.
package disk

import "math"

// Probe reports the bytes an unprivileged process can still write on the
// file system holding path (an existing file or directory). Free is the
// real one.
type Probe func(path string) (int64, error)

// Unknown is what Free reports where the platform offers no way to ask:
// the largest count, so that no check refuses.
const Unknown int64 = math.MaxInt64

var _ Probe = Free
