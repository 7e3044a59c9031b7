//go:build !linux

package fsm

import (
	"errors"
	"os"
)

// syncfsWorks: there is no syncfs(2) here, so a checkpoint fsyncs each
// file, and the file cache fsyncs a dirty file before it closes it.
func (f *FSM) syncfsWorks() bool { return false }

func syncfs(*os.File) error { return errors.New("fsm: no syncfs on this platform") }
