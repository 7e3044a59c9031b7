package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// VersionChange is a group's active version before and after SetVersion.
type VersionChange = transport.SetVersionResponse

// SetVersion raises the active version of group (a broker group, or
// MetaGroup) to n, through its leader: the version of the commands its
// leader may propose and of the formats its replicas write. The leader
// first asks every member which versions its build supports, and refuses
// (naming the member) if one stops short of n or does not answer. A group
// at n or past it is left as it is. A version is never lowered: once
// raised, a node of a release that does not support it refuses to start
// on the group's data, so raise it only when the upgrade is to stay.
func (a *Client) SetVersion(ctx context.Context, group string, n uint32) (*VersionChange, error) {
	req := transport.SetVersionRequest{Group: group, Version: version.Number(n)}
	body, err := a.groupRequest(ctx, group, transport.TypeSetVersion, req)
	if err != nil {
		return nil, err
	}
	var out VersionChange
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("qmq: %s answer of %s: %w", transport.TypeSetVersion, group, err)
	}
	return &out, nil
}
