//go:build !linux

package fsm

import (
	"io/fs"
	"os"
	"path/filepath"
)

// syncData makes the segments a snapshot linked into staging durable, one
// fsync each (through the links: they are the same files), and every
// directory of the FSM's data.
func (f *FSM) syncData(staging string) error {
	err := filepath.WalkDir(staging, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		file, err := os.Open(path)
		if err != nil {
			return err
		}
		defer file.Close()
		return file.Sync()
	})
	if err != nil {
		return err
	}
	return syncTree(filepath.Join(f.cfg.Dir, dataDir))
}
