package tlsconf

import "os"

// stamp is what tells that a file changed without reading it: its
// modification time, size and inode. A file replaced by rename gets a new
// inode even where the time and size match. missing marks a file that
// could not be looked at.
type stamp struct {
	mtime   int64 // nanoseconds since the epoch
	size    int64
	inode   uint64 // 0 where the platform has none
	missing bool
}

// stampOf is fi's stamp.
func stampOf(fi os.FileInfo) stamp {
	return stamp{mtime: fi.ModTime().UnixNano(), size: fi.Size(), inode: inode(fi)}
}
