package snapshot

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/disk"
)

// Sink is the raft.SnapshotSink of a Store: it receives one snapshot,
// either the links the state machine staged for it (Adopt) or a stream
// received from a leader, which raft writes (Write).
type Sink struct {
	store  *Store
	dir    string // <id>.tmp until Close
	meta   raft.SnapshotMeta
	stream *os.File
	done   bool
	// head collects the stream's header and manifest as they arrive;
	// manifestLen is the manifest's length once the header is in.
	head        []byte
	manifestLen int
	sized       bool  // the manifest arrived and the disk has room
	err         error // why the snapshot was abandoned
}

// ID returns the snapshot's id.
func (k *Sink) ID() string { return k.meta.ID }

// Write appends to the raw stream. As soon as the stream's manifest has
// arrived it checks that the disk has room to keep the stream and restore
// it; if not, or if the head is malformed, it abandons the snapshot and
// fails with ErrNoSpace or ErrBad.
func (k *Sink) Write(p []byte) (int, error) {
	if k.err != nil {
		return 0, k.err
	}
	if k.done {
		return 0, fmt.Errorf("snapshot: %s: write after close", k.meta.ID)
	}
	if !k.sized {
		if err := k.takeHead(p); err != nil {
			k.abandon(err)
			return 0, err
		}
	}
	if k.stream == nil {
		f, err := os.Create(filepath.Join(k.dir, streamFile))
		if err != nil {
			return 0, fmt.Errorf("snapshot: stream: %w", err)
		}
		k.stream = f
	}
	n, err := k.stream.Write(p)
	k.meta.Size += int64(n)
	return n, err
}

// takeHead adds what p holds of the stream's header and manifest to
// k.head; once the manifest is whole, it checks the free space.
func (k *Sink) takeHead(p []byte) error {
	for !k.sized && len(p) > 0 {
		want := headerSize
		if len(k.head) >= headerSize {
			want += k.manifestLen + 4
		}
		take := min(len(p), want-len(k.head))
		k.head, p = append(k.head, p[:take]...), p[take:]
		switch {
		case len(k.head) < want:
		case want == headerSize:
			n, err := checkHeader(k.head)
			if err != nil {
				return fmt.Errorf("snapshot: receive %s: %w", k.meta.ID, err)
			}
			k.manifestLen = n
		default:
			m, err := checkManifest(k.head[headerSize:], k.store.check)
			if err != nil {
				return fmt.Errorf("snapshot: receive %s: %w", k.meta.ID, err)
			}
			k.head, k.sized = nil, true
			return k.store.checkSpace(k.meta.ID, m.StreamSize())
		}
	}
	return nil
}

// abandon removes what the sink received, and makes it fail from now on.
func (k *Sink) abandon(err error) {
	k.err = err
	if k.stream != nil {
		k.stream.Close()
		k.stream = nil
	}
	if rerr := os.RemoveAll(k.dir); rerr != nil {
		k.store.log.Warn("removing a refused snapshot", "id", k.meta.ID, "error", rerr)
	}
}

// Adopt makes the directory staging, where the state machine linked the
// files m lists (each at LinkPath), the snapshot's, and m its manifest: it
// moves the directory into the snapshot, copying nothing, so staging must
// be on the store's file system. Call it instead of Write, then Close or
// Cancel.
func (k *Sink) Adopt(staging string, m *Manifest) error {
	if err := os.Rename(staging, filepath.Join(k.dir, filesDir)); err != nil {
		return fmt.Errorf("snapshot: adopt links: %w", err)
	}
	if err := os.WriteFile(filepath.Join(k.dir, manifestFile), m.encode(), 0o644); err != nil {
		return fmt.Errorf("snapshot: write manifest: %w", err)
	}
	k.meta.Size = m.StreamSize()
	return nil
}

// Close completes the snapshot durably and reaps old ones.
func (k *Sink) Close() error {
	if k.err != nil {
		return k.err
	}
	if k.done {
		return nil
	}
	k.done = true
	if k.stream != nil {
		err := k.stream.Sync()
		if cerr := k.stream.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.RemoveAll(k.dir)
			return fmt.Errorf("snapshot: stream: %w", err)
		}
	}
	mb, err := json.Marshal(&k.meta)
	if err == nil {
		err = disk.WriteFileAtomic(k.dir, metaFile, mb)
	}
	if err == nil {
		err = disk.SyncTree(k.dir, disk.Dirs)
	}
	final := strings.TrimSuffix(k.dir, tmpSuffix)
	if err == nil {
		err = os.Rename(k.dir, final)
	}
	if err == nil {
		err = disk.SyncDir(k.store.dir)
	}
	if err != nil {
		os.RemoveAll(k.dir)
		return fmt.Errorf("snapshot: complete: %w", err)
	}
	k.store.reap()
	return nil
}

// Cancel abandons the snapshot.
func (k *Sink) Cancel() error {
	if k.done || k.err != nil {
		return nil
	}
	k.done = true
	if k.stream != nil {
		k.stream.Close()
	}
	return os.RemoveAll(k.dir)
}
