//go:build !unix

package tlsconf

import "os"

// inode is 0: the platform has no inode numbers, and a file's time and
// size alone tell a change.
func inode(os.FileInfo) uint64 { return 0 }
