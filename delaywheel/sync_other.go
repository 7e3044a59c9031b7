//go:build !linux

package delaywheel

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncHours makes the files and directories of the hours written since
// the last sync durable, one fsync each, and the schedule directory.
func syncHours(dir string, hours map[int64]bool) error {
	for hour := range hours {
		root := filepath.Join(dir, HourName(hour))
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
	return fsync(dir)
}

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
