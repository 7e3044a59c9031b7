package server

import (
	"fmt"

	"github.com/hashicorp/raft"
)

// A broker group the metaserver drained takes no sends (READONLY). Each
// node learns it from its heartbeats' replies and keeps the last answer in
// its Raft stable store, so that a node restarted in a drained group
// refuses sends from its start, not from its first heartbeat reply (it
// took sends in between, which a drain is meant to stop). A node that
// never heard starts writable.

// writableKey is where a broker node keeps the last writable flag its
// metaserver gave.
var writableKey = []byte("qmq-writable")

// storedWritable returns the flag kept in stable, true if none is.
func storedWritable(stable raft.StableStore) (bool, error) {
	b, err := stable.Get(writableKey)
	if err != nil && err.Error() != "not found" {
		return false, fmt.Errorf("server: read the writable flag from the raft store: %w", err)
	}
	return string(b) != "0", nil
}

// keepWritable records writable in the stable store (Node.kept: what it
// holds); a failure is logged, and the next heartbeat reply tries again.
func (n *Node) keepWritable(writable bool) {
	v := []byte("1")
	if !writable {
		v = []byte("0")
	}
	if err := n.raftGroup.store.Stable().Set(writableKey, v); err != nil {
		n.log.Warn("keeping the writable flag", "writable", writable, "error", err)
		return
	}
	n.kept.Store(writable)
}
