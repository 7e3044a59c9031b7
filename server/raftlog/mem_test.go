package raftlog

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/limits"
)

// heapAfterGC is the heap in use once garbage is collected: twice, so
// that what sync.Pools hold goes too.
func heapAfterGC() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// bigEntries returns entries first..first+n-1 of size bytes each, their
// first byte their index.
func bigEntries(first uint64, n, size int) []*raft.Log {
	ls := make([]*raft.Log, n)
	for i := range ls {
		idx := first + uint64(i)
		data := make([]byte, size)
		data[0] = byte(idx)
		ls[i] = &raft.Log{Index: idx, Term: 1, Type: raft.LogCommand, Data: data}
	}
	return ls
}

// wantBigEntries fails unless s holds entries first..last as bigEntries
// made them.
func wantBigEntries(t *testing.T, s raft.LogStore, first, last uint64, size int) {
	t.Helper()
	for i := first; i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || l.Index != i || len(l.Data) != size || l.Data[0] != byte(i) {
			t.Fatalf("entry %d: index %d, %d bytes, %v", i, l.Index, len(l.Data), err)
		}
	}
}

// raft-wal kept the write buffer of every sealed segment (as large as the
// largest batch appended to it) until the segment left the log: 160 MiB
// of 2 MiB batches held 12 MiB in three segments of 64 MiB. A sealed
// segment now lets its writer go, and only the tail's buffer stays.
func TestWALKeepsOnlyTheTailsWriteBuffer(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, WAL)
	defer s.Close()
	const size, perBatch, batches = 256 << 10, 8, 80 // 2 MiB a batch, 160 MiB
	before := heapAfterGC()
	for b := range batches {
		if err := s.logs.StoreLogs(bigEntries(uint64(1+b*perBatch), perBatch, size)); err != nil {
			t.Fatal(err)
		}
	}
	held := heapAfterGC() - before
	t.Logf("held %.1f MiB", float64(held)/(1<<20))
	// The tail's buffer (4 MiB for 2 MiB batches), and less than 1 MiB of
	// indexes and open files besides.
	if held > 5<<20 {
		t.Fatalf("the store holds %.1f MiB after 160 MiB in 2 MiB batches, want at most 5 MiB", float64(held)/(1<<20))
	}
	segments, _ := filepath.Glob(filepath.Join(dir, WALDir, "*.wal"))
	if len(segments) < 4 {
		t.Fatalf("%d segment files, want at least 4 (160 MiB in %d MiB segments)", len(segments), walSegmentSize>>20)
	}
	wantBigEntries(t, s.logs, 1, batches*perBatch, size)
}

// Sealed segments are read through the file once their writer is gone,
// while appends, seals, rotations and cuts go on: every read gets the
// entry stored, and the log reads back whole after a reopen.
func TestWALReadsWhileSegmentsSeal(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 64<<10, hclog.NewNullLogger()) // a segment every few batches
	if err != nil {
		t.Fatal(err)
	}
	const size, last = 3000, 1500
	var written atomic.Uint64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() {
		for i := uint64(1); i <= last; i += 5 {
			if err := s.logs.StoreLogs(bigEntries(i, 5, size)); err != nil {
				errs <- err
				return
			}
			written.Store(i + 4)
		}
	})
	for range 3 {
		wg.Go(func() {
			for written.Load() < last {
				w := written.Load()
				for i := max(1, w-60); i <= w; i++ {
					var l raft.Log
					if err := s.logs.GetLog(i, &l); err != nil || l.Index != i || l.Data[0] != byte(i) {
						errs <- fmt.Errorf("entry %d: index %d, %v", i, l.Index, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A cut through a sealed segment (ForceSeal of the tail, then a new
	// one), then more entries after it.
	if err := s.logs.DeleteRange(last-100, last); err != nil {
		t.Fatal(err)
	}
	if err := s.logs.StoreLogs(bigEntries(last-100, 10, size)); err != nil {
		t.Fatal(err)
	}
	wantBigEntries(t, s.logs, 1, last-91, size)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, WAL)
	defer s.Close()
	wantBigEntries(t, s.logs, 1, last-91, size)
	if l, _ := s.logs.LastIndex(); l != last-91 {
		t.Fatalf("last index %d after reopening, want %d", l, last-91)
	}
}

// A head truncation (raft compacting after a snapshot) deletes the files of
// the sealed segments it covers, with their readers closed.
func TestWALDeletesSegmentsBelowTheCompaction(t *testing.T) {
	dir := t.TempDir()
	s, err := openWAL(dir, 64<<10, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 3000
	for i := uint64(1); i <= 500; i += 5 {
		if err := s.logs.StoreLogs(bigEntries(i, 5, size)); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, WALDir, "*.wal"))
		return len(m)
	}
	before := count()
	if err := s.logs.DeleteRange(1, 450); err != nil {
		t.Fatal(err)
	}
	// raft-wal deletes the files once no read holds the old state: at once
	// here, where nothing reads.
	if after := count(); after >= before || after > 4 {
		t.Fatalf("%d segment files before the compaction, %d after; want at most 4 (50 entries of 3 kB in 64 KiB segments)", before, after)
	}
	wantBigEntries(t, s.logs, 451, 500, size)
}

// The largest entry a broker's batch can make (server.MaxMaxBatchBytes,
// 32 MiB, and one more request) is over three segments: it is written
// whole into one segment that it seals, and reads back before and after a
// reopen. (server's build fails if such an entry could pass what raft-wal
// reads back.)
func TestWALTakesAnEntryLargerThanASegment(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir, WAL)
	const big = 32<<20 + limits.MaxFrame
	if big <= walSegmentSize {
		t.Fatalf("entry of %d bytes fits a %d-byte segment", big, walSegmentSize)
	}
	for _, batch := range [][]*raft.Log{bigEntries(1, 3, 1000), bigEntries(4, 1, big), bigEntries(5, 3, 1000)} {
		if err := s.logs.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
	}
	check := func() {
		t.Helper()
		wantBigEntries(t, s.logs, 1, 3, 1000)
		wantBigEntries(t, s.logs, 4, 4, big)
		wantBigEntries(t, s.logs, 5, 7, 1000)
	}
	check()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, WAL)
	defer s.Close()
	check()
}
