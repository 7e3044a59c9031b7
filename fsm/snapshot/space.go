package snapshot

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/disk"
)

// Receiving a snapshot writes it twice: the Store keeps the stream as it
// arrives, then the state machine's restore writes each of its files
// beside the live data before swapping them in (the live data stays until
// the swap). Both check the free space first and refuse with ErrNoSpace
// rather than fill the disk halfway: the store, once the stream's manifest
// has arrived, wants twice the stream's size free (Manifest.StreamSize);
// the restore wants the files' total size (Manifest.FilesSize). Both want
// SpaceReserve on top.

// SpaceReserve is the space a snapshot being received or restored must
// leave free, for the logs and Raft to go on writing meanwhile: 64 MiB.
const SpaceReserve = 64 << 20

// ErrNoSpace means the disk has too little space free for a snapshot.
var ErrNoSpace = errors.New("snapshot: not enough disk space")

// CheckFree asks probe for the space free at dir and fails with ErrNoSpace
// if it is below need, naming both; what describes the write, for the
// error. A probe that fails is logged and the check passes: the write
// itself still fails if the disk fills.
func CheckFree(probe disk.Probe, log hclog.Logger, dir string, need int64, what string) error {
	free, err := probe(dir)
	if err != nil {
		log.Warn("cannot tell the free disk space", "path", dir, "for", what, "error", err)
		return nil
	}
	if free < need {
		return fmt.Errorf("%w: %s needs %d bytes free in %s, %d are", ErrNoSpace, what, need, dir, free)
	}
	return nil
}

// checkSpace checks that the store's disk can take a received stream of
// size bytes and its restore: twice its size and the reserve.
func (s *Store) checkSpace(id string, size int64) error {
	what := fmt.Sprintf("receiving snapshot %s (twice its %d bytes and a %d-byte reserve)", id, size, SpaceReserve)
	return CheckFree(s.free, s.log, s.dir, 2*size+SpaceReserve, what)
}
