package fsm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// checkpointSyncsClosedFiles: syncData makes durable, and reports the
// write-back errors of, files the file cache closed without an fsync, so
// the cache need not fsync the dirty files it evicts.
const checkpointSyncsClosedFiles = true

// syncData makes everything written to the file system holding the FSM's
// directory durable, with one syncfs(2) however many logs were written.
// It goes through the descriptor of the directory the FSM opened in Open:
// syncfs reports the write-back errors met since its descriptor was
// opened, so it sees a failure to write back a file the file cache has
// closed since. The staging directory is not needed here.
func (f *FSM) syncData(string) error {
	return unix.Syncfs(int(f.dirFile.Fd()))
}

// syncLogs makes every log durable on the apply goroutine, for a
// checkpoint written at once (retention's): one syncfs however many logs
// were written, where fsyncing each would cost one per subject written
// since the last checkpoint. A failure a log met outside its writer (a
// write-back error syncfs reported to nobody else) also fails it.
func (f *FSM) syncLogs() error {
	if err := f.syncData(""); err != nil {
		return fmt.Errorf("fsm: checkpoint: %w", err)
	}
	return f.logsFailed()
}
