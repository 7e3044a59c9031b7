package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/qmqgo/qmq/internal/binenc"
)

// A snapshot travels between nodes as one stream:
//
//	magic "QMQSNAP1"
//	manifest-length u32 | manifest | crc32c(manifest) u32
//	for each file the manifest lists, in order: its bytes | crc32c(bytes) u32
//
// manifest: checkpoint (uvarint-prefixed bytes) | file-count uvarint |
// (path, size uvarint)…  Paths are relative to the state machine's data
// directory and must pass the path check of whoever reads the stream.
var magic = [8]byte{'Q', 'M', 'Q', 'S', 'N', 'A', 'P', '1'}

const (
	maxManifest = 1 << 30
	maxFiles    = 1 << 20
	// maxBytes bounds the sum of a manifest's file sizes (an exbibyte), so
	// that sums over them cannot overflow.
	maxBytes = 1 << 60
	// maxPath bounds the length of a file's path.
	maxPath = 4096
)

// ErrBad means a snapshot is malformed: a stream, a manifest or a stored
// snapshot's metadata that does not decode, names a path its reader's
// check refuses, or fails a checksum.
var ErrBad = errors.New("snapshot: malformed snapshot")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// File is one file of a snapshot: a segment, whole up to Size.
type File struct {
	Rel  string // slash-separated, relative to the state machine's data directory
	Size int64
}

// Manifest is what a snapshot holds: the state machine's checkpoint,
// opaque here, and the files whose first bytes it describes.
type Manifest struct {
	Checkpoint []byte
	Files      []File
}

func (m *Manifest) encode() []byte {
	b := binenc.AppendBytes(nil, m.Checkpoint)
	b = binenc.AppendUvarint(b, uint64(len(m.Files)))
	for _, f := range m.Files {
		b = binenc.AppendString(b, f.Rel)
		b = binenc.AppendUvarint(b, uint64(f.Size))
	}
	return b
}

// decodeManifest decodes a manifest whose every path check accepts.
func decodeManifest(b []byte, check func(rel string) error) (*Manifest, error) {
	r := binenc.NewReader(b)
	m := &Manifest{Checkpoint: r.Bytes(maxManifest)}
	n := r.Count(min(maxFiles, r.Remaining()))
	var total int64
	for i := 0; i < n && r.Err() == nil; i++ {
		f := File{Rel: r.String(maxPath), Size: int64(r.Uvarint())}
		if r.Err() == nil {
			if err := check(f.Rel); err != nil {
				if !errors.Is(err, ErrBad) {
					err = fmt.Errorf("%w: file path %q: %w", ErrBad, f.Rel, err)
				}
				return nil, err
			}
			if f.Size < 0 || f.Size > maxBytes-total {
				return nil, fmt.Errorf("%w: file %s has size %d", ErrBad, f.Rel, f.Size)
			}
			total += f.Size
		}
		m.Files = append(m.Files, f)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrBad, err)
	}
	return m, nil
}

// StreamSize returns the length of m's stream.
func (m *Manifest) StreamSize() int64 {
	return int64(headerSize+len(m.encode())+4+4*len(m.Files)) + m.FilesSize()
}

// FilesSize returns the sum of the sizes of m's files: what restoring it
// writes.
func (m *Manifest) FilesSize() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Write writes the stream of m to w: its manifest, then each of its files,
// the first Size bytes of what open returns for its path.
func Write(w io.Writer, m *Manifest, open func(rel string) (io.ReadCloser, error)) error {
	mb := m.encode()
	head := append(magic[:], binary.LittleEndian.AppendUint32(nil, uint32(len(mb)))...)
	head = append(head, mb...)
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(mb, castagnoli))
	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("snapshot: write stream: %w", err)
	}
	for _, f := range m.Files {
		if err := copyFile(w, f, open); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(w io.Writer, f File, open func(string) (io.ReadCloser, error)) error {
	r, err := open(f.Rel)
	if err != nil {
		return err
	}
	defer r.Close()
	h := crc32.New(castagnoli)
	if _, err := io.CopyN(io.MultiWriter(w, h), r, f.Size); err != nil {
		return fmt.Errorf("snapshot: write file %s: %w", f.Rel, err)
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32())); err != nil {
		return fmt.Errorf("snapshot: write stream: %w", err)
	}
	return nil
}

// ReadHead reads a stream's header and manifest from r, and fails with
// ErrBad unless check accepts each of its files' paths. ReadFiles reads
// the rest.
func ReadHead(r io.Reader, check func(rel string) error) (*Manifest, error) {
	var head [headerSize]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrBad, err)
	}
	n, err := checkHeader(head[:])
	if err != nil {
		return nil, err
	}
	// Read what arrives rather than allocate what the header claims: a
	// corrupt length must not cost a gigabyte.
	mb, err := io.ReadAll(io.LimitReader(r, int64(n)+4))
	if err == nil && len(mb) < n+4 {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrBad, err)
	}
	return checkManifest(mb, check)
}

// headerSize is the length of a stream's header: magic and manifest length.
const headerSize = len(magic) + 4

// checkHeader checks a stream's header and returns its manifest's length.
func checkHeader(head []byte) (int, error) {
	if [8]byte(head[:8]) != magic {
		return 0, fmt.Errorf("%w: bad magic %q", ErrBad, head[:8])
	}
	n := binary.LittleEndian.Uint32(head[8:headerSize])
	if n > maxManifest {
		return 0, fmt.Errorf("%w: manifest of %d bytes", ErrBad, n)
	}
	return int(n), nil
}

// checkManifest checks the manifest and its checksum, as mb holds them,
// and decodes it.
func checkManifest(mb []byte, check func(rel string) error) (*Manifest, error) {
	n := len(mb) - 4
	if crc32.Checksum(mb[:n], castagnoli) != binary.LittleEndian.Uint32(mb[n:]) {
		return nil, fmt.Errorf("%w: manifest checksum mismatch", ErrBad)
	}
	return decodeManifest(mb[:n], check)
}

// ReadFiles reads the files m lists from r, which ReadHead read m from,
// handing each file's bytes to the writer create returns for its path,
// and closing it. A stream cut short or a checksum that does not match
// fails with ErrBad, and so does a failed write or close of a file (with
// its own error); create's errors are returned as they are. A file's bytes
// are written before its checksum is read: what the writers wrote must be
// discarded if ReadFiles fails.
func ReadFiles(r io.Reader, m *Manifest, create func(rel string) (io.WriteCloser, error)) error {
	for _, f := range m.Files {
		if err := readFile(r, f, create); err != nil {
			return err
		}
	}
	return nil
}

func readFile(r io.Reader, f File, create func(string) (io.WriteCloser, error)) error {
	w, err := create(f.Rel)
	if err != nil {
		return err
	}
	h := crc32.New(castagnoli)
	_, err = io.CopyN(io.MultiWriter(w, h), r, f.Size)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: file %s: %w", ErrBad, f.Rel, err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return fmt.Errorf("%w: file %s checksum: %w", ErrBad, f.Rel, err)
	}
	if binary.LittleEndian.Uint32(sum[:]) != h.Sum32() {
		return fmt.Errorf("%w: file %s checksum mismatch", ErrBad, f.Rel)
	}
	return nil
}
