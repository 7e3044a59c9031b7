package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// memLogStore is a raft.LogStore in a map that counts its reads and can
// be made to fail its writes.
type memLogStore struct {
	mu        sync.Mutex
	logs      map[uint64]raft.Log
	reads     atomic.Int64
	failStore error
}

func newMemLogStore() *memLogStore { return &memLogStore{logs: map[uint64]raft.Log{}} }

func (m *memLogStore) GetLog(i uint64, l *raft.Log) error {
	m.reads.Add(1)
	m.mu.Lock()
	defer m.mu.Unlock()
	got, ok := m.logs[i]
	if !ok {
		return raft.ErrLogNotFound
	}
	*l = got
	return nil
}

func (m *memLogStore) StoreLog(l *raft.Log) error { return m.StoreLogs([]*raft.Log{l}) }

func (m *memLogStore) StoreLogs(ls []*raft.Log) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failStore != nil {
		return m.failStore
	}
	for _, l := range ls {
		m.logs[l.Index] = *l
	}
	return nil
}

func (m *memLogStore) DeleteRange(min, max uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := min; i <= max; i++ {
		delete(m.logs, i)
	}
	return nil
}

func (m *memLogStore) FirstIndex() (uint64, error) { return 0, nil }
func (m *memLogStore) LastIndex() (uint64, error)  { return 0, nil }

// always is a log cache's keep for a node that always leads.
func always() bool { return true }

// entry returns entry i whose Data makes it cost size bytes in the cache.
func entry(i uint64, size int64) *raft.Log {
	data := bytes.Repeat([]byte{byte(i)}, int(size-cacheOverhead))
	return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: data}
}

// storeRange stores entries first..last, each costing size bytes.
func storeRange(t *testing.T, c raft.LogStore, first, last uint64, size int64) {
	t.Helper()
	for i := first; i <= last; i++ {
		if err := c.StoreLogs([]*raft.Log{entry(i, size)}); err != nil {
			t.Fatal(err)
		}
	}
}

// wantCached fails unless the cache holds entries first..last and nothing
// else, answers GetLog for each from memory with the entry stored, and
// sends every other index in [lo, hi] to the store.
func wantCached(t *testing.T, c *cache, store *memLogStore, first, last, lo, hi uint64) {
	t.Helper()
	f, n, b := c.cached()
	switch {
	case last < first && n != 0:
		t.Fatalf("cache holds %d entries from %d (%d bytes), want none", n, f, b)
	case last >= first && (f != first || uint64(n) != last-first+1):
		t.Fatalf("cache holds %d entries from %d, want %d..%d", n, f, first, last)
	}
	if b > c.max {
		t.Fatalf("cache holds %d bytes, over its %d", b, c.max)
	}
	for i := lo; i <= hi; i++ {
		before := store.reads.Load()
		var l raft.Log
		err := c.GetLog(i, &l)
		fromStore := store.reads.Load() != before
		inCache := i >= first && i <= last
		if fromStore == inCache {
			t.Fatalf("entry %d: read from the store %v, cached %v", i, fromStore, inCache)
		}
		if _, stored := store.logs[i]; !stored {
			if !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("entry %d is not stored: GetLog %v", i, err)
			}
			continue
		}
		if err != nil || l.Index != i || len(l.Data) == 0 || l.Data[0] != byte(i) {
			t.Fatalf("entry %d: %d, %d bytes, %v", i, l.Index, len(l.Data), err)
		}
	}
}

func TestLogCacheHoldsRecentEntriesUpToItsBytes(t *testing.T) {
	const size = 1000
	for _, tc := range []struct {
		name        string
		max         int64
		first, last uint64 // cached after entries 1..10 are stored
	}{
		{"three exactly", 3 * size, 8, 10},
		{"a byte under three", 3*size - 1, 9, 10},
		{"a byte over three", 3*size + 1, 8, 10},
		{"one exactly", size, 10, 10},
		{"a byte under one", size - 1, 1, 0},
		{"all ten", 10 * size, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemLogStore()
			c := NewCache(store, tc.max, always).(*cache)
			storeRange(t, c, 1, 10, size)
			wantCached(t, c, store, tc.first, tc.last, 1, 11)
		})
	}
}

func TestLogCacheEvictsOldestAsOneBatchArrives(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 4*1000, always).(*cache)
	var batch []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		batch = append(batch, entry(i, 1000))
	}
	if err := c.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 7, 10, 1, 10)
	// Smaller entries make room for more.
	if err := c.StoreLogs([]*raft.Log{entry(11, 500), entry(12, 500)}); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 8, 12, 1, 12)
}

func TestLogCacheNeverHoldsAnEntryOverItsBytes(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 2000, always).(*cache)
	storeRange(t, c, 1, 2, 1000)
	// At the bound: held alone.
	storeRange(t, c, 3, 3, 2000)
	wantCached(t, c, store, 3, 3, 1, 3)
	// Over it: not held, and the run starts again after it.
	storeRange(t, c, 4, 4, 2001)
	wantCached(t, c, store, 1, 0, 1, 4)
	storeRange(t, c, 5, 6, 1000)
	wantCached(t, c, store, 5, 6, 1, 6)
}

func TestLogCacheStartsANewRunWhenEntriesDoNotFollow(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 10*1000, always).(*cache)
	storeRange(t, c, 1, 5, 1000)
	// A gap (a snapshot installed, the log restarted after it).
	storeRange(t, c, 20, 21, 1000)
	wantCached(t, c, store, 20, 21, 1, 22)
	// Entries again from an index already held (a follower's log cut
	// back and written by a new leader): the new ones are what is read.
	if err := c.DeleteRange(21, 21); err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs([]*raft.Log{{Index: 21, Term: 2, Data: []byte{21, 2}}}); err != nil {
		t.Fatal(err)
	}
	var l raft.Log
	if err := c.GetLog(21, &l); err != nil || l.Term != 2 {
		t.Fatalf("entry 21 after it was written again: term %d, %v", l.Term, err)
	}
	wantCached(t, c, store, 20, 21, 19, 22)
}

func TestLogCacheDropsDeletedEntries(t *testing.T) {
	for _, tc := range []struct {
		name        string
		min, max    uint64
		first, last uint64 // cached after the delete; 1..0 for none
	}{
		{"a prefix below the run", 1, 4, 5, 10},
		{"a prefix into the run", 1, 7, 8, 10},
		{"a prefix to its first", 1, 5, 6, 10},
		{"a prefix through the run", 1, 10, 1, 0},
		{"a suffix from its last", 10, 10, 5, 9},
		{"a suffix into the run", 8, 12, 5, 7},
		{"a suffix through the run", 3, 12, 1, 0},
		{"a suffix past the run", 11, 12, 5, 10},
		{"a hole in the run", 7, 8, 1, 0},
		{"an empty range", 8, 7, 5, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newMemLogStore()
			c := NewCache(store, 6*1000, always).(*cache)
			storeRange(t, c, 1, 10, 1000)
			wantCached(t, c, store, 5, 10, 1, 10)
			if err := c.DeleteRange(tc.min, tc.max); err != nil {
				t.Fatal(err)
			}
			wantCached(t, c, store, tc.first, tc.last, 1, 12)
		})
	}
}

func TestLogCacheCachesNothingTheStoreRefused(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 10*1000, always).(*cache)
	storeRange(t, c, 1, 2, 1000)
	store.failStore = errors.New("disk gone")
	if err := c.StoreLogs([]*raft.Log{entry(3, 1000)}); !errors.Is(err, store.failStore) {
		t.Fatalf("StoreLogs: %v, want the store's error", err)
	}
	wantCached(t, c, store, 1, 2, 1, 3)
}

func TestLogCacheKeepsACopyNotTheCallersEntry(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 10*1000, always).(*cache)
	l := entry(1, 1000)
	if err := c.StoreLogs([]*raft.Log{l}); err != nil {
		t.Fatal(err)
	}
	if c.entries[0] == l {
		t.Fatal("the cache holds the caller's *raft.Log (a leader's proposal future)")
	}
	l.Index, l.Term = 99, 99 // raft reuses nothing, but a held pointer would see this
	wantCached(t, c, store, 1, 1, 1, 1)
}

func TestLogCacheHoldsNothingWhileTheNodeFollows(t *testing.T) {
	store := newMemLogStore()
	var leading atomic.Bool
	c := NewCache(store, 10*1000, leading.Load).(*cache)
	storeRange(t, c, 1, 3, 1000)
	wantCached(t, c, store, 1, 0, 1, 3)
	leading.Store(true)
	storeRange(t, c, 4, 6, 1000)
	wantCached(t, c, store, 4, 6, 1, 6)
	// Leadership lost: the next entries stored empty the cache.
	leading.Store(false)
	wantCached(t, c, store, 4, 6, 1, 6)
	storeRange(t, c, 7, 7, 1000)
	wantCached(t, c, store, 1, 0, 1, 7)
}

func TestLogCacheOfZeroBytesIsTheStore(t *testing.T) {
	store := newMemLogStore()
	if c := NewCache(store, 0, always); c != raft.LogStore(store) {
		t.Fatalf("NewCache(store, 0, always) = %T, want the store itself", c)
	}
}

func TestLogCacheIsMonotonicAsItsStore(t *testing.T) {
	wal := mustOpen(t, t.TempDir(), WAL)
	defer wal.Close()
	bolt := mustOpen(t, t.TempDir(), Bolt)
	defer bolt.Close()
	for _, tc := range []struct {
		store raft.LogStore
		want  bool
	}{{wal.logs, true}, {bolt.logs, false}, {newMemLogStore(), false}} {
		if got := NewCache(tc.store, 1<<20, always).(raft.MonotonicLogStore).IsMonotonic(); got != tc.want {
			t.Errorf("%T: IsMonotonic %v, want %v", tc.store, got, tc.want)
		}
	}
}

// One goroutine stores entries as raft's main loop does, one deletes
// prefixes as its snapshots do, and readers read every index as
// replication does: every read gets the entry stored at its index.
func TestLogCacheUnderConcurrentUse(t *testing.T) {
	store := newMemLogStore()
	c := NewCache(store, 20*500, always).(*cache)
	const last = 3000
	var written, deleted atomic.Uint64 // deleted: the last index a read may find gone
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= last; i += 3 {
			batch := []*raft.Log{entry(i, 500), entry(i+1, 300), entry(i+2, 700)}
			if err := c.StoreLogs(batch); err != nil {
				errs <- err
				return
			}
			written.Store(i + 2)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for deleted.Load() < last-100 {
			if w, from := written.Load(), deleted.Load()+1; w >= from+100 {
				deleted.Store(w - 100) // before the entries go: readers may miss them from now on
				if err := c.DeleteRange(from, w-100); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for written.Load() < last {
				w := written.Load()
				for i := max(deleted.Load()+1, w-40); i <= w; i++ {
					var l raft.Log
					err := c.GetLog(i, &l)
					if errors.Is(err, raft.ErrLogNotFound) && i <= deleted.Load() {
						continue // deleted meanwhile
					}
					if err != nil || l.Index != i || l.Data[0] != byte(i) {
						errs <- fmt.Errorf("entry %d: index %d, %v", i, l.Index, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, _, b := c.cached(); b > c.max {
		t.Fatalf("cache holds %d bytes, over its %d", b, c.max)
	}
}
