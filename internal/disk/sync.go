package disk

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Making writes durable. Two ways, which callers choose between:
//
//   - Syncfs: one syncfs(2) through a descriptor of the file system held
//     since before the writes, however many files they touched. It reports
//     the write-back errors met since that descriptor was opened only from
//     Linux 5.8 on (SyncfsReportsWriteBack); other platforms have none
//     (HasSyncfs).
//   - SyncTree: walk the files written, fsyncing each, and the directories
//     whose entries changed (SyncDir).
//
// Either way an error means data may be lost: callers pass it up as a
// storage failure, never retry it into a success (a write-back error is
// reported once).

// SyncDir fsyncs the directory dir, making the creations, renames and
// removals of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// Entries names what SyncTree fsyncs.
type Entries uint8

const (
	// Files are the entries that are not directories (a hard link is its
	// file: fsyncing it makes the file durable).
	Files Entries = 1 << iota
	// Dirs are the directories, root included: fsyncing one makes the
	// creations of its entries durable.
	Dirs
)

// SyncTree fsyncs the entries of the tree at root that which names, in
// lexical order, stopping at the first error: that of opening or fsyncing
// an entry (an *fs.PathError naming it), or of walking the tree (a root
// that does not exist included).
func SyncTree(root string, which Entries) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && which&Dirs == 0 || !d.IsDir() && which&Files == 0 {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return fsync(f)
	})
}

// fsync is (*os.File).Sync; tests replace it to see what SyncTree and
// WriteFileAtomic sync.
var fsync = (*os.File).Sync

// WriteFileAtomic writes data to dir/name durably: a temporary file beside
// it, fsynced, renamed over the old one, and dir fsynced (SyncDir), so
// that a crash leaves either file whole. A failure before the rename
// leaves the old file in place, and none leaves the temporary file; the
// error names the step and the file.
func WriteFileAtomic(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := fsync(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("rename %s: %w", name, err)
	}
	return SyncDir(dir)
}
