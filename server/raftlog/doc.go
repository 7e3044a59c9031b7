// Package raftlog is a node's Raft log store: the log and the stable state
// (term, vote) hashicorp/raft keeps for one member of a group, in the
// node's data directory.
//
// Open opens the store a data directory holds, or a new one of the Kind
// asked for: WAL (hashicorp/raft-wal in raft-wal/, one fsync per batch of
// entries; a broker's) or Bolt (hashicorp/raft-boltdb in raft.db; the
// metaserver's, and a broker's from before raft-wal). It holds the
// directory locked until Close: a second process gets ErrInUse. raft-wal
// is opened with a segment filer of this package's, which bounds what a
// long log holds: a sealed segment drops its write buffer, at most
// MaxFiles descriptors are open, and the files a compaction frees are
// unlinked off raft-wal's write lock.
//
//	store, err := raftlog.Open(dataDir, raftlog.WAL, logger)
//	logs := raftlog.NewCache(store.Logs(), raftlog.DefaultCache, leading)
//	r, err := raft.NewRaft(cfg, fsm, logs, store.Stable(), snaps, trans)
//
// NewCache keeps the most recent entries stored in memory, up to a number
// of bytes, so that a leader feeds followers that keep up without reading
// entries back from the store.
//
// DESIGN.md walks one batch of entries from raft's StoreLogs through the
// cache to its fsync, and says why each piece is built the way it is.
package raftlog
