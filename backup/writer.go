package backup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/qmqgo/qmq/internal/disk"
)

// PartialSuffix is added to a backup's file name while it is written.
const PartialSuffix = ".partial"

// Writer writes a backup file: path+PartialSuffix, renamed to path by
// Finish.
type Writer struct {
	path   string
	f      *os.File
	h      *Header
	crc    uint32 // of the bytes written
	n      int64  // the snapshot's bytes written
	chunks int
}

// Create starts the backup of the snapshot h says at path, replacing a
// partial file there.
func Create(path string, h *Header) (*Writer, error) {
	f, err := os.OpenFile(path+PartialSuffix, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	w := &Writer{path: path, f: f, h: h}
	if err := w.write(h.encode()); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

// Resume reopens path+PartialSuffix to continue it after its last whole
// chunk, cutting off what follows (a chunk torn by the interruption). A
// file whose header does not verify is refused with a *CorruptError.
func Resume(path string) (*Writer, error) {
	f, err := os.OpenFile(path+PartialSuffix, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	rd := &reader{r: f}
	h, err := rd.header()
	if err != nil {
		f.Close()
		return nil, err
	}
	w := &Writer{path: path, f: f, h: h}
	kept, crc := rd.off, rd.crc
	for {
		b, err := rd.chunk(w.chunks + 1)
		if err != nil || b == nil || w.n+int64(len(b)) > h.Size {
			break
		}
		w.chunks++
		w.n += int64(len(b))
		kept, crc = rd.off, rd.crc
	}
	w.crc = crc
	if err := f.Truncate(kept); err != nil {
		f.Close()
		return nil, fmt.Errorf("backup: %w", err)
	}
	if _, err := f.Seek(kept, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("backup: %w", err)
	}
	return w, nil
}

// Header is the header of the snapshot the file holds.
func (w *Writer) Header() *Header { return w.h }

// Written is how many bytes of the snapshot the file holds.
func (w *Writer) Written() int64 { return w.n }

// Chunks is how many chunks the file holds.
func (w *Writer) Chunks() int { return w.chunks }

func chunkHead(b []byte) []byte {
	head := binary.LittleEndian.AppendUint32(nil, uint32(len(b)))
	return binary.LittleEndian.AppendUint32(head, crc32.Checksum(b, castagnoli))
}

func (w *Writer) write(b []byte) error {
	if _, err := w.f.Write(b); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	w.crc = crc32.Update(w.crc, castagnoli, b)
	return nil
}

// Write appends the next chunk of the snapshot, 1 to MaxChunk bytes.
func (w *Writer) Write(b []byte) error {
	if len(b) == 0 || len(b) > MaxChunk || w.n+int64(len(b)) > w.h.Size {
		return fmt.Errorf("backup: a chunk of %d bytes at %d of %d", len(b), w.n, w.h.Size)
	}
	if err := w.write(append(chunkHead(b), b...)); err != nil {
		return err
	}
	w.n += int64(len(b))
	w.chunks++
	return nil
}

// Finish writes the trailer of a file that holds the whole snapshot,
// fsyncs it, renames it to its name and fsyncs the directory.
func (w *Writer) Finish() error {
	if w.n != w.h.Size {
		return fmt.Errorf("backup: %d of the snapshot's %d bytes written", w.n, w.h.Size)
	}
	t := binary.LittleEndian.AppendUint32(nil, 0)
	t = binary.LittleEndian.AppendUint64(t, uint64(w.n))
	t = binary.LittleEndian.AppendUint32(t, crc32.Update(w.crc, castagnoli, t))
	if _, err := w.f.Write(t); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	if err := os.Rename(w.path+PartialSuffix, w.path); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return disk.SyncDir(filepath.Dir(w.path))
}

// Close fsyncs and closes the partial file, leaving it to be resumed.
// Idempotent.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	err := w.f.Sync()
	err = errors.Join(err, w.f.Close())
	w.f = nil
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// Discard closes and removes the partial file.
func (w *Writer) Discard() error {
	w.Close()
	if err := os.Remove(w.path + PartialSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}
