package transport

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/qmqgo/qmq/internal/binenc"
)

// A backup reads one snapshot of a group's state, chunk by chunk: the
// first request names no snapshot and the leader takes one; each next
// names it and the offset reached. A request naming a snapshot the node
// no longer holds is answered from a new one at offset 0, which tells the
// client to start over.

// BackupRequest asks for the chunk of a snapshot of Group (a broker
// group, or "meta") at Offset (TypeBackup, JSON). SnapshotID "" asks for
// a new snapshot. Max bounds the chunk's bytes (0: MaxBackupChunk).
type BackupRequest struct {
	Group      string `json:"group"`
	SnapshotID string `json:"snapshot_id,omitempty"`
	Offset     int64  `json:"offset"`
	Max        int    `json:"max,omitempty"`
}

// MaxBackupChunk is the most bytes of snapshot one BackupChunk carries.
const MaxBackupChunk = 1 << 20

// Backup kinds: what state a snapshot's stream holds.
const (
	BackupBroker byte = 1 // a broker group's state machine (fsm/snapshot's stream)
	BackupMeta   byte = 2 // the metaserver's (fsm/meta's JSON)
)

// BackupChunk is the answer to a BackupRequest: which snapshot, its Raft
// index and term, its configuration (raft.Configuration as JSON), its
// stream's Size, and the bytes Data at Offset, with their CRC32C.
//
//	version 1 | kind byte | group | snapshot-id | index uvarint | term uvarint |
//	configuration bytes | size uvarint | offset uvarint | data bytes | crc32c(data) u32
//
// (strings and bytes uvarint-prefixed.)
type BackupChunk struct {
	Kind          byte
	Group         string
	SnapshotID    string
	Index, Term   uint64
	Configuration []byte
	Size, Offset  int64
	Data          []byte
}

const backupChunkVersion = 1

// maxBackupConfiguration bounds a chunk's configuration: the JSON of a
// group's members.
const maxBackupConfiguration = 1 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode encodes c with its checksum.
func (c *BackupChunk) Encode() []byte {
	b := []byte{backupChunkVersion, c.Kind}
	b = binenc.AppendString(b, c.Group)
	b = binenc.AppendString(b, c.SnapshotID)
	b = binenc.AppendUvarint(b, c.Index)
	b = binenc.AppendUvarint(b, c.Term)
	b = binenc.AppendBytes(b, c.Configuration)
	b = binenc.AppendUvarint(b, uint64(c.Size))
	b = binenc.AppendUvarint(b, uint64(c.Offset))
	b = binenc.AppendBytes(b, c.Data)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(c.Data, castagnoli))
}

// DecodeBackupChunk decodes and checks a BackupChunk: its checksum, and
// that its data lies within its snapshot.
func DecodeBackupChunk(b []byte) (*BackupChunk, error) {
	r := binenc.NewReader(b)
	if v := r.Byte(); r.Err() == nil && v != backupChunkVersion {
		return nil, fmt.Errorf("%w: backup chunk version %d", ErrMalformed, v)
	}
	c := &BackupChunk{Kind: r.Byte(), Group: r.String(256), SnapshotID: r.String(256), Index: r.Uvarint(), Term: r.Uvarint(),
		Configuration: r.Bytes(maxBackupConfiguration)}
	size, off := r.Uvarint(), r.Uvarint()
	c.Data = r.Bytes(MaxBackupChunk)
	sum := r.Uint32()
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: backup chunk: %w", ErrMalformed, err)
	}
	if c.Kind != BackupBroker && c.Kind != BackupMeta {
		return nil, fmt.Errorf("%w: backup chunk of kind %d", ErrMalformed, c.Kind)
	}
	if size > 1<<62 || off > size || uint64(len(c.Data)) > size-off {
		return nil, fmt.Errorf("%w: backup chunk of %d bytes at %d, past its snapshot's %d", ErrMalformed, len(c.Data), off, size)
	}
	c.Size, c.Offset = int64(size), int64(off)
	if crc32.Checksum(c.Data, castagnoli) != sum {
		return nil, fmt.Errorf("%w: backup chunk at %d: checksum mismatch", ErrMalformed, off)
	}
	return c, nil
}
