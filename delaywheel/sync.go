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

// syncHours makes the files and directories of the hours written since
// the last sync durable. Where there is syncfs(2) (Linux), one syncfs of
// the file system holding the schedule directory dir does it for all of
// them at once, however many hours they are. dir must be the descriptor
// the schedule opened when it opened (see Schedule.dirFile): syncfs
// reports the write-back errors of the file system since its descriptor
// was opened, so a descriptor opened now would not report an error from
// before, met while writing back an hour closed since the last sync.
// Elsewhere each file and directory of those hours is fsynced, and then
// dir, through the descriptor the schedule keeps open.
func syncHours(dir *os.File, hours map[int64]bool) error {
	if dir == nil {
		return os.ErrClosed
	}
	if disk.HasSyncfs {
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
