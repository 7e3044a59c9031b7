package raftlog

import (
	"sync"

	"github.com/hashicorp/raft"
)

// cacheOverhead is what one cached entry costs beyond its Data and
// Extensions: the copied raft.Log (about 100 bytes) and its slot.
const cacheOverhead = 128

// DefaultCache is the bytes of recent Raft entries a node keeps in
// memory unless configured otherwise: 16 MiB.
const DefaultCache = 16 << 20

// cache is a raft.LogStore that keeps the most recent entries it stored
// in memory, up to max bytes, so that the leader feeds followers that keep
// up without reading entries back from the store and decoding them. A
// follower caches nothing: it reads entries back only to apply them.
//
// It holds one run of consecutive entries, oldest first:
//
//	entries[0]        entries[len-1]
//	index first  ...  index first+len-1 (the last entry stored)
//
// A store that continues the run appends to it and drops the oldest
// entries while the run holds more than max bytes; one that does not (a
// follower's log cut back after a leader change, a snapshot installed)
// starts a new run. An entry larger than max is never held: the run ends
// before it and starts again after it. Each entry is held as a copy of the
// raft.Log, not the caller's pointer: on a leader that pointer lies in the
// proposal's future, which would keep the proposal's result alive too.
//
// raft calls StoreLogs and GetLog from its own goroutines and DeleteRange
// from its snapshot goroutine too; one lock guards the run. Entries are
// cached only once the store has them, and dropped before the store
// deletes them, so the cache never answers for an entry the store lacks.
type cache struct {
	store raft.LogStore
	max   int64
	// keep reports whether entries stored now are to be cached: only while
	// the node leads (a follower feeds no one). Once it reports false, the
	// next store empties the cache.
	keep func() bool

	mu      sync.RWMutex
	first   uint64 // index of entries[0]; meaningless while entries is empty
	entries []*raft.Log
	bytes   int64 // what the entries cost, by cacheSize
}

// NewCache puts a cache of the most recent entries stored in front of
// store (see cache): up to max bytes of them, stored while keep reports
// true (a node passes whether it leads: a follower feeds no one). max 0
// disables it: store is returned as it is.
func NewCache(store raft.LogStore, max int64, keep func() bool) raft.LogStore {
	if max <= 0 {
		return store
	}
	return &cache{store: store, max: max, keep: keep}
}

// cacheSize is what caching l costs.
func cacheSize(l *raft.Log) int64 {
	return int64(len(l.Data)+len(l.Extensions)) + cacheOverhead
}

// GetLog implements raft.LogStore: from memory if the entry is cached,
// else from the store.
func (c *cache) GetLog(index uint64, log *raft.Log) error {
	c.mu.RLock()
	if n := uint64(len(c.entries)); n > 0 && index >= c.first && index-c.first < n {
		*log = *c.entries[index-c.first]
		c.mu.RUnlock()
		return nil
	}
	c.mu.RUnlock()
	return c.store.GetLog(index, log)
}

// StoreLog implements raft.LogStore.
func (c *cache) StoreLog(log *raft.Log) error {
	return c.StoreLogs([]*raft.Log{log})
}

// StoreLogs implements raft.LogStore: the store first, then the cache.
func (c *cache) StoreLogs(logs []*raft.Log) error {
	if err := c.store.StoreLogs(logs); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.keep() {
		c.reset()
		return nil
	}
	for _, l := range logs {
		c.add(l)
	}
	return nil
}

// add appends l to the run, or starts a new one; c.mu is held.
func (c *cache) add(l *raft.Log) {
	size := cacheSize(l)
	if len(c.entries) > 0 && l.Index != c.first+uint64(len(c.entries)) {
		c.reset()
	}
	if size > c.max {
		c.reset()
		return
	}
	if len(c.entries) == 0 {
		c.first = l.Index
	}
	cp := *l
	c.entries = append(c.entries, &cp)
	c.bytes += size
	for c.bytes > c.max {
		c.dropFirst()
	}
}

// dropFirst forgets the oldest entry; c.mu is held and the run is not
// empty. Its slot is cleared, so the entry is not kept alive by the slice
// (whose array append replaces as the run moves on: pointers only).
func (c *cache) dropFirst() {
	c.bytes -= cacheSize(c.entries[0])
	c.entries[0] = nil
	c.entries = c.entries[1:]
	c.first++
	if len(c.entries) == 0 {
		c.reset()
	}
}

// dropLast forgets the newest entry; c.mu is held and the run is not
// empty.
func (c *cache) dropLast() {
	last := len(c.entries) - 1
	c.bytes -= cacheSize(c.entries[last])
	c.entries[last] = nil
	c.entries = c.entries[:last]
}

// reset empties the run; c.mu is held.
func (c *cache) reset() {
	clear(c.entries)
	c.entries, c.bytes = c.entries[:0], 0
}

// DeleteRange implements raft.LogStore: the entries from min to max
// (inclusive) leave the cache, then the store.
func (c *cache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	for len(c.entries) > 0 && c.first >= min && c.first <= max {
		c.dropFirst()
	}
	for n := len(c.entries); n > 0 && c.first+uint64(n-1) >= min && c.first+uint64(n-1) <= max; n = len(c.entries) {
		c.dropLast()
	}
	if n := uint64(len(c.entries)); n > 0 && min <= max && min > c.first && max < c.first+n-1 {
		c.reset() // a hole in the run: raft never asks for one
	}
	c.mu.Unlock()
	return c.store.DeleteRange(min, max)
}

// FirstIndex implements raft.LogStore.
func (c *cache) FirstIndex() (uint64, error) { return c.store.FirstIndex() }

// LastIndex implements raft.LogStore.
func (c *cache) LastIndex() (uint64, error) { return c.store.LastIndex() }

// IsMonotonic implements raft.MonotonicLogStore for a store that does
// (raft-wal refuses gaps: after installing a snapshot raft must empty such
// a log instead of leaving a gap).
func (c *cache) IsMonotonic() bool {
	m, ok := c.store.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// cached reports the run's first index, its length and its bytes.
func (c *cache) cached() (first uint64, n int, bytes int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.first, len(c.entries), c.bytes
}
