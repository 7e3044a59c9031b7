package admin

import (
	"context"
	"encoding/json"
	"time"

	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/transport"
)

// BackupSource reads snapshots of one group from its leader, chunk by
// chunk (package backup's Source).
type BackupSource struct {
	gc *transport.LeaderClient
}

// backupCallTimeout bounds one chunk's request: the first takes the
// snapshot.
const backupCallTimeout = 2 * time.Minute

// BackupSource returns a source of snapshots of group (a broker group,
// or MetaGroup), found through the metaserver. Close it when done.
func (a *Client) BackupSource(ctx context.Context, group string) (*BackupSource, error) {
	gc, err := a.groupClient(ctx, group)
	if err != nil {
		return nil, sdk.Error(err)
	}
	return &BackupSource{gc: gc}, nil
}

// Backup asks the group's leader for one chunk of a snapshot.
func (s *BackupSource) Backup(ctx context.Context, req transport.BackupRequest) (*transport.BackupChunk, error) {
	b, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, backupCallTimeout)
	defer cancel()
	body, err := callNeeding(ctx, s.gc, transport.TypeBackup, req, b)
	if err != nil {
		return nil, sdk.Error(err)
	}
	return transport.DecodeBackupChunk(body)
}

// Close closes the source's connections.
func (s *BackupSource) Close() { s.gc.Close() }
