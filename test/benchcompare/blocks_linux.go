package main

import (
	"io/fs"
	"syscall"
)

// blocks is the space a file takes on disk (512-byte blocks), as du
// counts it, and for a file with several hard links its inode, so that
// it is counted once.
func blocks(info fs.FileInfo) (size int64, inode [2]uint64, linked bool) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512, [2]uint64{uint64(st.Dev), st.Ino}, st.Nlink > 1
	}
	return info.Size(), [2]uint64{}, false
}
