package disk

import (
	"os"

	"golang.org/x/sys/unix"
)

// Writeback starts writing f's dirty pages in [off, off+n) to the device
// and returns without waiting for them (sync_file_range(2) with
// SYNC_FILE_RANGE_WRITE), so that a later fsync of f has little left to
// write. It is a hint, not a durability point: its error is dropped,
// since that fsync reports any failure of these pages.
func Writeback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
