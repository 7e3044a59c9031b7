// Package disk is what the storage code asks of the file system: how much
// space it has left, and how to make what was written durable.
//
// Free reports the space left, so that code about to write something large
// can refuse it up front, with a clear error, rather than fill the disk and
// fail halfway; code that checks space takes a Probe, so that tests can
// pretend the disk is full.
//
// SyncDir, SyncTree, Syncfs and WriteFileAtomic make writes durable (see
// sync.go): the one place that knows syncfs(2) and when it can be trusted,
// how to walk and fsync where it cannot, and how to replace a file so that
// a crash leaves the old one or the new one whole. Writeback starts
// writing dirty pages early, so that the fsync that follows has little
// left to do.
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
