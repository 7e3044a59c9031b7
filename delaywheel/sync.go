package delaywheel

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/qmqgo/qmq/internal/disk"
)

// syncfs is disk.Syncfs; tests replace it to see which descriptor each
// checkpoint syncs through.
var syncfs = disk.Syncfs

// kernelRelease is disk.KernelRelease; tests replace it.
var kernelRelease = disk.KernelRelease

// syncfsTrusted reports whether one syncfs(2) may stand for the fsyncs of
// the hours written: the platform has it and the kernel reports write-back
// errors through it (disk.SyncfsReportsWriteBack: Linux 5.8 on). Before
// 5.8 a write-back error of an hour file closed since the last sync would
// be lost, so the hours are fsynced file by file, as the state machine
// does its logs.
func syncfsTrusted() bool {
	if !disk.HasSyncfs {
		return false
	}
	release, err := kernelRelease()
	return err == nil && disk.SyncfsReportsWriteBack(release)
}

// syncHours makes the files and directories of the hours written since
// the last sync durable. With trustSyncfs (syncfsTrusted, asked once when
// the schedule opens), one syncfs(2) of
// the file system holding the schedule directory dir does it for all of
// them at once, however many hours they are. dir must be the descriptor
// the schedule opened when it opened (see Schedule.dirFile): syncfs
// reports the write-back errors of the file system since its descriptor
// was opened, so a descriptor opened now would not report an error from
// before, met while writing back an hour closed since the last sync.
// Without it (no syncfs, or a kernel whose syncfs reports no write-back
// errors) each file and directory of those hours is fsynced, and then
// dir, through the descriptor the schedule keeps open.
func syncHours(dir *os.File, hours map[int64]bool, trustSyncfs bool) error {
	if dir == nil {
		return os.ErrClosed
	}
	if trustSyncfs {
		return syncfs(dir)
	}
	for hour := range hours {
		err := disk.SyncTree(filepath.Join(dir.Name(), HourName(hour)), disk.Files|disk.Dirs)
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // an hour removed since it was written
			return err
		}
	}
	return dir.Sync()
}
