package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// makeDir creates the directory path if it is missing and makes its entry
// in the parent durable: a Raft log whose directory a crash could forget
// would forget the node's votes with it.
func makeDir(path string) error {
	if err := os.Mkdir(path, 0o755); errors.Is(err, os.ErrExist) {
		return nil
	} else if err != nil {
		return err
	}
	parent, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(parent.Sync(), parent.Close())
}

// dirLock is an exclusive flock(2) on a directory, held while its file is
// open.
type dirLock struct{ f *os.File }

// lockDir locks the directory path, retrying for up to timeout while
// another open file holds it (another process, or this one opening the
// store twice); then it gives up with ErrInUse.
func lockDir(path string, timeout time.Duration) (*dirLock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("raftlog: lock %s: %w", path, err)
	}
	deadline := time.Now().Add(timeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return &dirLock{f: f}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w: %s", ErrInUse, path)
			}
			return nil, fmt.Errorf("raftlog: lock %s: %w", path, err)
		}
		time.Sleep(lockRetry)
	}
}

// lockRetry is how often lockDir tries again.
const lockRetry = 50 * time.Millisecond

// Close releases the lock.
func (l *dirLock) Close() error { return l.f.Close() }
