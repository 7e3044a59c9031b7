//go:build !linux

package delaywheel

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncHours makes the files and directories of the hours written since
// the last sync durable, one fsync each, and the schedule directory dir
// through the descriptor the schedule keeps open.
func syncHours(dir *os.File, hours map[int64]bool) error {
	if dir == nil {
		return os.ErrClosed
	}
	for hour := range hours {
		root := filepath.Join(dir.Name(), HourName(hour))
		err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return fsync(path)
		})
		if err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return dir.Sync()
}

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
