//go:build !linux

package disk

import (
	"errors"
	"os"
)

// HasSyncfs reports whether this platform has syncfs(2): only Linux does.
const HasSyncfs = false

// errNoSyncfs is what Syncfs and KernelRelease return here.
var errNoSyncfs = errors.New("disk: no syncfs on this platform")

// Syncfs fails: there is no syncfs(2) here (HasSyncfs), and callers walk
// the files they wrote instead (SyncTree).
func Syncfs(*os.File) error { return errNoSyncfs }

// KernelRelease fails: it is asked only to decide on syncfs.
func KernelRelease() (string, error) { return "", errNoSyncfs }

// SyncfsReportsWriteBack is false: there is no syncfs(2) here.
func SyncfsReportsWriteBack(string) bool { return false }
