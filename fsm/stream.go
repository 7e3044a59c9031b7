package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path"
	"strings"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/binenc"
)

// A snapshot travels between nodes as one stream:
//
//	magic "QMQSNAP1"
//	manifest-length u32 | manifest | crc32c(manifest) u32
//	for each file the manifest lists, in order: its bytes | crc32c(bytes) u32
//
// manifest: checkpoint (uvarint-prefixed bytes) | file-count uvarint |
// (path, size uvarint)…  Paths are relative to the store's directory and
// must name a segment of one of its logs.
var streamMagic = [8]byte{'Q', 'M', 'Q', 'S', 'N', 'A', 'P', '1'}

const (
	maxManifest      = 1 << 30
	maxSnapshotFiles = 1 << 20
	// maxSnapshotBytes bounds the sum of a manifest's file sizes (an
	// exbibyte), so that sums over them cannot overflow.
	maxSnapshotBytes = 1 << 60
)

// ErrBadSnapshot means a snapshot stream is malformed or fails a checksum.
var ErrBadSnapshot = errors.New("fsm: malformed snapshot")

// snapFile is one file of a snapshot: a segment, whole up to size.
type snapFile struct {
	rel  string // slash-separated, relative to the store's directory
	size int64
}

type manifest struct {
	checkpoint []byte
	files      []snapFile
}

func (m *manifest) encode() []byte {
	b := binenc.AppendBytes(nil, m.checkpoint)
	b = binenc.AppendUvarint(b, uint64(len(m.files)))
	for _, f := range m.files {
		b = binenc.AppendString(b, f.rel)
		b = binenc.AppendUvarint(b, uint64(f.size))
	}
	return b
}

func decodeManifest(b []byte) (*manifest, error) {
	r := binenc.NewReader(b)
	m := &manifest{checkpoint: r.Bytes(maxManifest)}
	n := r.Count(min(maxSnapshotFiles, r.Remaining()))
	var total int64
	for i := 0; i < n && r.Err() == nil; i++ {
		f := snapFile{rel: r.String(4096), size: int64(r.Uvarint())}
		if r.Err() == nil {
			if err := checkSnapPath(f.rel); err != nil {
				return nil, err
			}
			if f.size < 0 || f.size > maxSnapshotBytes-total {
				return nil, fmt.Errorf("%w: file %s has size %d", ErrBadSnapshot, f.rel, f.size)
			}
			total += f.size
		}
		m.files = append(m.files, f)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: manifest: %w", ErrBadSnapshot, err)
	}
	return m, nil
}

// checkSnapPath accepts only messages/X.seg, pull/X.seg, journal/X.seg,
// consume/SUBJECT/X.seg, schedule/HOUR/X.seg and
// schedule/HOUR/dispatched/X.seg: a stream cannot write anywhere else.
func checkSnapPath(rel string) error {
	parts := strings.Split(rel, "/")
	ok := path.Clean(rel) == rel && strings.HasSuffix(rel, ".seg")
	switch {
	case !ok:
	case len(parts) == 2 && (parts[0] == messagesDir || parts[0] == pullDir || parts[0] == journalDir):
	case len(parts) == 3 && parts[0] == scheduleDir && delaywheel.IsHourName(parts[1]):
	case len(parts) == 4 && parts[0] == scheduleDir && delaywheel.IsHourName(parts[1]) && parts[2] == "dispatched":
	case len(parts) == 3 && parts[0] == consumeDir && CheckName("subject", parts[1]) == nil:
	default:
		ok = false
	}
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".."
	}
	if !ok {
		return fmt.Errorf("%w: file path %q", ErrBadSnapshot, rel)
	}
	return nil
}

// streamSize returns the length of m's stream.
func streamSize(m *manifest) int64 {
	return int64(headerSize+len(m.encode())+4+4*len(m.files)) + filesSize(m)
}

// filesSize returns the sum of the sizes of m's files: what restoring it
// writes.
func filesSize(m *manifest) int64 {
	var n int64
	for _, f := range m.files {
		n += f.size
	}
	return n
}

// writeStream writes m and its files, which open supplies, to w.
func writeStream(w io.Writer, m *manifest, open func(rel string) (io.ReadCloser, error)) error {
	mb := m.encode()
	head := append(streamMagic[:], binary.LittleEndian.AppendUint32(nil, uint32(len(mb)))...)
	head = append(head, mb...)
	head = binary.LittleEndian.AppendUint32(head, crc32.Checksum(mb, castagnoli))
	if _, err := w.Write(head); err != nil {
		return fmt.Errorf("fsm: write snapshot: %w", err)
	}
	for _, f := range m.files {
		if err := copyFile(w, f, open); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(w io.Writer, f snapFile, open func(string) (io.ReadCloser, error)) error {
	r, err := open(f.rel)
	if err != nil {
		return err
	}
	defer r.Close()
	h := crc32.New(castagnoli)
	if _, err := io.CopyN(io.MultiWriter(w, h), r, f.size); err != nil {
		return fmt.Errorf("fsm: write snapshot file %s: %w", f.rel, err)
	}
	if _, err := w.Write(binary.LittleEndian.AppendUint32(nil, h.Sum32())); err != nil {
		return fmt.Errorf("fsm: write snapshot: %w", err)
	}
	return nil
}

// readStream reads a stream from r, handing each file's bytes to create's
// writer; it returns the manifest once every checksum matched.
func readStream(r io.Reader, create func(rel string) (io.WriteCloser, error)) (*manifest, error) {
	m, err := readHead(r)
	if err != nil {
		return nil, err
	}
	if err := readFiles(r, m, create); err != nil {
		return nil, err
	}
	return m, nil
}

// readHead reads a stream's header and manifest from r.
func readHead(r io.Reader) (*manifest, error) {
	var head [headerSize]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrBadSnapshot, err)
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
		return nil, fmt.Errorf("%w: manifest: %w", ErrBadSnapshot, err)
	}
	return checkManifest(mb)
}

// headerSize is the length of a stream's header: magic and manifest length.
const headerSize = len(streamMagic) + 4

// checkHeader checks a stream's header and returns its manifest's length.
func checkHeader(head []byte) (int, error) {
	if [8]byte(head[:8]) != streamMagic {
		return 0, fmt.Errorf("%w: bad magic %q", ErrBadSnapshot, head[:8])
	}
	n := binary.LittleEndian.Uint32(head[8:headerSize])
	if n > maxManifest {
		return 0, fmt.Errorf("%w: manifest of %d bytes", ErrBadSnapshot, n)
	}
	return int(n), nil
}

// checkManifest checks the manifest and its checksum, as mb holds them,
// and decodes it.
func checkManifest(mb []byte) (*manifest, error) {
	n := len(mb) - 4
	if crc32.Checksum(mb[:n], castagnoli) != binary.LittleEndian.Uint32(mb[n:]) {
		return nil, fmt.Errorf("%w: manifest checksum mismatch", ErrBadSnapshot)
	}
	return decodeManifest(mb[:n])
}

// readFiles reads the files m lists from r, handing each file's bytes to
// create's writer, and checks their checksums.
func readFiles(r io.Reader, m *manifest, create func(rel string) (io.WriteCloser, error)) error {
	for _, f := range m.files {
		if err := readFile(r, f, create); err != nil {
			return err
		}
	}
	return nil
}

func readFile(r io.Reader, f snapFile, create func(string) (io.WriteCloser, error)) error {
	w, err := create(f.rel)
	if err != nil {
		return err
	}
	h := crc32.New(castagnoli)
	_, err = io.CopyN(io.MultiWriter(w, h), r, f.size)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: file %s: %w", ErrBadSnapshot, f.rel, err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return fmt.Errorf("%w: file %s checksum: %w", ErrBadSnapshot, f.rel, err)
	}
	if binary.LittleEndian.Uint32(sum[:]) != h.Sum32() {
		return fmt.Errorf("%w: file %s checksum mismatch", ErrBadSnapshot, f.rel)
	}
	return nil
}
