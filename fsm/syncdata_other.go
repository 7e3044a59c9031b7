//go:build !linux

package fsm

import (
	"io/fs"
	"os"
	"path/filepath"
)

// checkpointSyncsClosedFiles: syncData fsyncs the snapshot's segments
// through new descriptors, which need not see an earlier write-back
// failure, so the file cache fsyncs a dirty file before it closes it.
const checkpointSyncsClosedFiles = false

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

// syncLogs makes every log durable on the apply goroutine, for a
// checkpoint written at once (retention's): an fsync per log written.
func (f *FSM) syncLogs() error { return f.store.sync() }
