package fsm

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelRelease returns the running kernel's release (uname -r). Tests
// replace it.
var kernelRelease = func() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// syncfsReportsWriteBack reports whether syncfs(2) on a kernel of this
// release reports the write-back errors met since its descriptor was
// opened: from Linux 5.8 on (735e4ae5ba28, "vfs: track per-sb writeback
// errors and report them to syncfs"). Before, it returned 0 whatever was
// lost. A release it cannot read counts as older.
func syncfsReportsWriteBack(release string) bool {
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

// syncfsWorks reads the kernel's release and reports whether a checkpoint
// can trust one syncfs(2) to make its data durable and to report a
// write-back error met since Open, a closed file's included (see
// checkpointSync). On an older kernel it says why not, once per Open.
func (f *FSM) syncfsWorks() bool {
	release, err := kernelRelease()
	if err == nil && syncfsReportsWriteBack(release) {
		return true
	}
	f.log.Warn("this kernel's syncfs reports no write-back errors (Linux before 5.8): fsyncing every file it closes "+
		"and every log at a checkpoint instead of one syncfs, which costs more with many subjects",
		"kernel", release, "error", err)
	return false
}

// syncfs makes everything written to the file system holding d durable,
// with one syncfs(2), and reports the write-back errors met since d was
// opened.
func syncfs(d *os.File) error { return unix.Syncfs(int(d.Fd())) }
