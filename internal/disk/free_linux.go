package disk

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Free returns the bytes available to an unprivileged user on the file
// system holding path: statfs(2)'s available blocks (which leave out the
// blocks reserved for root) times the fragment size they are counted in,
// or the block size where the file system reports no fragment size.
func Free(path string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("disk: statfs %s: %w", path, err)
	}
	unit := uint64(st.Frsize)
	if unit == 0 {
		unit = uint64(st.Bsize)
	}
	if unit != 0 && st.Bavail > uint64(Unknown)/unit {
		return Unknown, nil
	}
	return int64(st.Bavail * unit), nil
}
