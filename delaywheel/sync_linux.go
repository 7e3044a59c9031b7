package delaywheel

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncfs is syncfs(2); tests replace it to see which descriptor each
// checkpoint syncs through.
var syncfs = unix.Syncfs

// syncHours makes the files and directories of the hours written since
// the last sync durable. On Linux one syncfs(2) of the file system holding
// the schedule directory dir does it for all of them at once, however many
// hours they are. dir must be the descriptor the schedule opened when it
// opened (see Schedule.dirFile): syncfs reports the write-back errors of
// the file system since its descriptor was opened, so a descriptor opened
// now would not report an error from before, met while writing back an
// hour closed since the last sync.
func syncHours(dir *os.File, _ map[int64]bool) error {
	if dir == nil {
		return os.ErrClosed
	}
	return syncfs(int(dir.Fd()))
}
