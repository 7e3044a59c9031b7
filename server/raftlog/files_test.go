package raftlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/qmqgo/qmq/test/poll"
)

// filesUnder returns how many of the process's descriptors are open on dir
// or on a file under it.
func filesUnder(tb testing.TB, dir string) int {
	tb.Helper()
	n, err := countFilesUnder(dir)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// countFilesUnder is filesUnder for any goroutine.
func countFilesUnder(dir string) (int, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("listing descriptors: %w", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err != nil {
			continue // the listing's own descriptor, closed since
		}
		if target == dir || strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n, nil
}

// storeMax raises a to n if n is larger.
func storeMax(a *atomic.Int64, n int64) {
	for {
		if old := a.Load(); n <= old || a.CompareAndSwap(old, n) {
			return
		}
	}
}

// walSegments returns how many segment files dir's raft-wal store holds.
func walSegments(tb testing.TB, dir string) int {
	tb.Helper()
	m, err := filepath.Glob(filepath.Join(dir, WALDir, "*.wal"))
	if err != nil {
		tb.Fatal(err)
	}
	return len(m)
}

// raft-wal kept every segment file open while its entries were in the log,
// so a long log (a compaction held back by failing snapshots or a lagging
// follower, large batches) held a descriptor per segment, outside what the
// node keeps for itself: 300 segments, 300 descriptors. Sealed segments are
// now opened when read and closed when idle, at most sealedSegmentFiles of
// them at once, and every entry still reads back, from many readers at
// once, before and after a reopen.
func TestWALHoldsBoundedSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	const segmentSize, size = 64 << 10, 12 << 10 // about five entries a segment
	s, err := openWAL(dir, segmentSize, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for walSegments(t, dir) < 301 {
		if err := s.logs.StoreLogs(bigEntries(last+1, 2, size)); err != nil {
			t.Fatal(err)
		}
		last += 2
	}
	walPath := filepath.Join(dir, WALDir)
	// While nothing is appended or cut: the sealed files, the tail,
	// wal-meta.db and the lock (MaxFiles has room for two more).
	const quiet = sealedSegmentFiles + 3
	check := func(when string) {
		t.Helper()
		if n := filesUnder(t, walPath); n > quiet {
			t.Fatalf("%s: %d descriptors open under raft-wal/ with %d segments, want at most %d",
				when, n, walSegments(t, dir), quiet)
		}
	}
	check("after the appends")
	wantBigEntries(t, s.logs, 1, last, size)
	check("after reading every entry")
	readAll := func(readers int) {
		t.Helper()
		var wg sync.WaitGroup
		var most atomic.Int64
		errs := make(chan error, readers)
		for r := range readers {
			wg.Go(func() {
				// Each reader reads the whole log, starting at its own place,
				// and counts the descriptors every 64 reads.
				for k := range last {
					i := 1 + (k+uint64(r)*last/uint64(readers))%last
					var l raft.Log
					if err := s.logs.GetLog(i, &l); err != nil || l.Index != i || len(l.Data) != size || l.Data[0] != byte(i) {
						errs <- fmt.Errorf("entry %d: index %d, %d bytes, %v", i, l.Index, len(l.Data), err)
						return
					}
					if k%64 != 0 {
						continue
					}
					// With the store's mutex held no segment file closes, so
					// the descriptors counted are all open at the end of the
					// listing: none is counted twice under two numbers.
					s.files.mu.Lock()
					n, err := countFilesUnder(walPath)
					s.files.mu.Unlock()
					if err != nil {
						errs <- err
						return
					}
					storeMax(&most, int64(n))
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if n := most.Load(); n > quiet {
			t.Fatalf("%d descriptors open under raft-wal/ while %d readers read %d segments, want at most %d",
				n, readers, walSegments(t, dir), quiet)
		}
	}
	readAll(sealedSegmentFiles + 8) // more readers than files: some wait
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := filesUnder(t, walPath); n != 0 {
		t.Fatalf("%d descriptors open under raft-wal/ after the store closed", n)
	}
	s, err = openWAL(dir, segmentSize, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check("after reopening") // raft-wal opens every sealed segment it finds
	readAll(8)
	check("after reading from eight readers")
}

// Many readers of more segments than files, with room for two: reads
// evict each other's files, wait when both are being read, and neither
// deadlock nor read a closed file, while the store never holds more than
// two sealed files.
func TestWALReadsThroughTwoSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := openWALFiles(dir, 64<<10, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 12 << 10
	var last uint64
	for walSegments(t, dir) < 21 {
		if err := s.logs.StoreLogs(bigEntries(last+1, 2, size)); err != nil {
			t.Fatal(err)
		}
		last += 2
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	var most atomic.Int64
	for r := range uint64(16) {
		wg.Go(func() {
			for k := range 4 * last {
				i := 1 + (k*(2*r+1)+r)%last // each reader its own stride
				var l raft.Log
				if err := s.logs.GetLog(i, &l); err != nil || l.Index != i || l.Data[0] != byte(i) {
					errs <- fmt.Errorf("entry %d: index %d, %v", i, l.Index, err)
					return
				}
				storeMax(&most, int64(s.files.opened()))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := most.Load(); n > 2 {
		t.Fatalf("%d sealed segment files open at once, want at most 2", n)
	}
	if n := filesUnder(t, filepath.Join(dir, WALDir)); n > 2+3 {
		t.Fatalf("%d descriptors open under raft-wal/, want at most 5 (two sealed files, the tail, wal-meta.db, the lock)", n)
	}
}

// sealedSegment writes a segment of the entries base..base+n-1 with dir's
// filer and seals it, returning its info.
func sealedSegment(t *testing.T, filer *segment.Filer, id, base uint64, n int) types.SegmentInfo {
	t.Helper()
	info := types.SegmentInfo{ID: id, BaseIndex: base, MinIndex: base, Codec: 1, SizeLimit: 64 << 10, CreateTime: time.Now()}
	w, err := filer.Create(info)
	if err != nil {
		t.Fatal(err)
	}
	var entries []types.LogEntry
	for i := range uint64(n) {
		entries = append(entries, types.LogEntry{Index: base + i, Data: []byte(fmt.Sprintf("entry %d", base+i))})
	}
	if err := w.Append(entries); err != nil {
		t.Fatal(err)
	}
	indexStart, err := w.ForceSeal()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	info.IndexStart, info.MaxIndex, info.SealTime = indexStart, base+uint64(n)-1, time.Now()
	return info
}

// wantEntry fails unless r reads entry idx as sealedSegment wrote it.
func wantEntry(t *testing.T, r types.SegmentReader, idx uint64) {
	t.Helper()
	b, err := r.GetLog(idx)
	if err != nil {
		t.Fatalf("entry %d: %v", idx, err)
	}
	defer b.Close()
	if want := fmt.Sprintf("entry %d", idx); string(b.Bs) != want {
		t.Fatalf("entry %d: %q, want %q", idx, b.Bs, want)
	}
}

// A sealed segment's reader with room for one file: a buffer read stays
// valid once its file is closed for another, a read waits while the one
// file is being read, a close during a read closes the file when the read
// ends, closing twice is harmless, reads after a close fail, and the
// reaper renames a segment's file whether it is open or not.
func TestSealedSegmentFileLifecycle(t *testing.T) {
	dir := t.TempDir()
	log := hclog.NewNullLogger()
	filer := segment.NewFiler(dir, walfs.New())
	reaper := newSegmentReaper(dir, log)
	defer reaper.close()
	files := newSegmentFiles(filer, 1, log)
	f := sealedSegments{Filer: filer, log: log, files: files, reaper: reaper}
	infoA, infoB, infoC := sealedSegment(t, filer, 1, 1, 10), sealedSegment(t, filer, 2, 11, 10), sealedSegment(t, filer, 3, 21, 10)
	a, err := f.Open(infoA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Open(infoB) // closes a's file
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Open(infoC)
	if err != nil {
		t.Fatal(err)
	}
	bufA, err := a.GetLog(5)
	if err != nil {
		t.Fatal(err)
	}
	wantEntry(t, b, 15) // closes a's file again
	if string(bufA.Bs) != "entry 5" {
		t.Fatalf("a buffer read before its file closed holds %q", bufA.Bs)
	}
	bufA.Close()
	if n := files.opened(); n != 1 {
		t.Fatalf("%d files open, want 1", n)
	}

	// b's file held as by a read under way: c's read waits for it.
	if _, err := files.acquire(b.(*sealedReader)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		buf, err := c.GetLog(25)
		if err == nil {
			if string(buf.Bs) != "entry 25" {
				err = fmt.Errorf("entry 25: %q", buf.Bs)
			}
			buf.Close()
		}
		done <- err
	}()
	poll.Until(t, 10*time.Second, "the read of c waiting for a file", func() bool {
		files.mu.Lock()
		defer files.mu.Unlock()
		return files.waits > 0
	})
	// raft-wal closes b while it is read: its file stays until the read ends.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := files.opened(); n != 1 {
		t.Fatalf("%d files open while b is read after its close, want 1", n)
	}
	files.release(b.(*sealedReader))
	if err := <-done; err != nil {
		t.Fatalf("the read of c, once b's file closed: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("closing b again: %v", err)
	}
	if _, err := b.GetLog(15); !errors.Is(err, errSegmentClosed) {
		t.Fatalf("read of a closed segment: %v, want errSegmentClosed", err)
	}

	// c's file is open, a's is not: both are renamed away.
	for _, info := range []types.SegmentInfo{infoA, infoC} {
		if err := f.Delete(info.BaseIndex, info.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, segment.FileName(info))); !os.IsNotExist(err) {
			t.Fatalf("%s after Delete: %v, want it gone", segment.FileName(info), err)
		}
	}
	wantEntry(t, c, 22) // through the file open when it was renamed
	for _, r := range []types.SegmentReader{a, c} {
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := files.opened(); n != 0 {
		t.Fatalf("%d files open after every segment closed, want 0", n)
	}
}
