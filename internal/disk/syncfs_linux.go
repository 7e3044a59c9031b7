package disk

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// HasSyncfs reports whether this platform has syncfs(2): Linux.
const HasSyncfs = true

// Syncfs makes everything written to the file system holding d durable
// with one syncfs(2), and reports the write-back errors met since d was
// opened (from Linux 5.8 on: see SyncfsReportsWriteBack). d must have been
// opened before the writes it is to vouch for: one opened afresh does not
// report an error met before it was.
func Syncfs(d *os.File) error { return unix.Syncfs(int(d.Fd())) }

// KernelRelease returns the running kernel's release (uname -r).
func KernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// SyncfsReportsWriteBack reports whether syncfs(2) on a kernel of this
// release reports the write-back errors met since its descriptor was
// opened: from Linux 5.8 on (735e4ae5ba28, "vfs: track per-sb writeback
// errors and report them to syncfs"). Before, it returned 0 whatever was
// lost. A release it cannot read counts as older.
func SyncfsReportsWriteBack(release string) bool {
	fields := strings.SplitN(release, ".", 3)
	if len(fields) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(fields[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(fields[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 5 || (major == 5 && minor >= 8)
}
