package server

import (
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/qmqgo/qmq/server/raftlog"
	"github.com/qmqgo/qmq/transport"
)

// filesForRaftAndMore is what a node keeps open besides client
// connections and the state machine's segment files (fitConns' reserved):
// its Raft log store, at most raftlog.MaxFiles (37: 32 sealed segments, the tail,
// a tail just cut, the directory fsynced for a new segment, wal-meta.db,
// the directory's lock; raft-boltdb keeps one, raft.db), and
// filesForPeersAndMore: 293.
const filesForRaftAndMore = raftlog.MaxFiles + filesForPeersAndMore

// filesForPeersAndMore is the rest of what a node keeps open besides client
// connections: Raft's peers (a pool of up to 8 connections to each, and
// theirs to it), snapshots being written and sent, the HTTP listener and
// its connections, its metaserver link, directories.
const filesForPeersAndMore = 256

// fitConns returns how many client connections the node may hold: conns
// (0: the transport's default), lowered if the process's file limit would
// not leave room for reserved descriptors besides. A client holding
// connections must never make the state machine fail to open a file: that
// stops the node.
func fitConns(conns, reserved int, log hclog.Logger) int {
	if conns <= 0 {
		conns = transport.DefaultMaxConns
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<31 {
		return conns
	}
	room := int(lim.Cur) - reserved - filesForRaftAndMore
	if conns <= room {
		return conns
	}
	fitted := max(room, 16)
	log.Warn("the process's file limit leaves room for fewer client connections: raise it (ulimit -n) to allow more",
		"file-limit", lim.Cur, "kept-for-the-node", reserved+filesForRaftAndMore, "max-conns", conns, "lowered-to", fitted)
	return fitted
}
