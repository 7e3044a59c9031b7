package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// syncRecorder replaces a cache's fsync: it records the files synced and
// fails those whose path is in fail.
type syncRecorder struct {
	mu     sync.Mutex
	synced []string
	fail   map[string]error
}

func recordSyncs(fs *Files) *syncRecorder {
	r := &syncRecorder{fail: map[string]error{}}
	fs.fsync = func(f *os.File) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.synced = append(r.synced, f.Name())
		if err := r.fail[f.Name()]; err != nil {
			return err
		}
		return f.Sync()
	}
	return r
}

func (r *syncRecorder) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.synced {
		if p == path {
			n++
		}
	}
	return n
}

func (r *syncRecorder) failWith(path string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail[path] = err
}

// activePath returns the path of l's active segment.
func activePath(l *Log) string { return l.active().path }

// syncLog syncs l or fails the test.
func syncLog(t *testing.T, l *Log) {
	t.Helper()
	if err := l.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

func TestFilesEvictionPrefersCleanFiles(t *testing.T) {
	fs := NewFiles(2)
	rec := recordSyncs(fs)
	root := t.TempDir()
	a := openLog(t, filepath.Join(root, "a"), Options{Files: fs})
	b := openLog(t, filepath.Join(root, "b"), Options{Files: fs})
	syncLog(t, a)
	syncLog(t, b)
	appendN(t, a, 3) // a dirty and the most recently used, b clean
	before := rec.count(activePath(a))
	openLog(t, filepath.Join(root, "c"), Options{Files: fs})
	if got := fs.Open(); got != 2 {
		t.Fatalf("%d files open, want 2", got)
	}
	if rec.count(activePath(a)) != before {
		t.Fatal("a dirty file was fsynced and evicted while a clean one was idle")
	}
	if a.active().f == nil || b.active().f != nil {
		t.Fatalf("a cached %v, b cached %v; want the clean b evicted", a.active().f != nil, b.active().f != nil)
	}
}

func TestFilesEvictionFsyncsDirtyFile(t *testing.T) {
	fs := NewFiles(2)
	rec := recordSyncs(fs)
	root := t.TempDir()
	a := openLog(t, filepath.Join(root, "a"), Options{Files: fs})
	syncLog(t, a)
	offs := appendN(t, a, 5) // written, not fsynced
	b := openLog(t, filepath.Join(root, "b"), Options{Files: fs})
	appendN(t, b, 5)
	path := activePath(a)
	if rec.count(path) != 0 {
		t.Fatalf("%s fsynced before any eviction", path)
	}
	// Both cached files are dirty: making room for c fsyncs the least
	// recently used, a's, then closes it.
	openLog(t, filepath.Join(root, "c"), Options{Files: fs})
	if rec.count(path) != 1 {
		t.Fatalf("%s fsynced %d times on eviction, want 1", path, rec.count(path))
	}
	if a.active().f != nil {
		t.Fatal("a's file still open after its eviction")
	}
	if got := fs.Open(); got != 2 {
		t.Fatalf("%d files open, want 2", got)
	}
	checkRecords(t, a, offs, 0) // reopened on a miss
}

// With DeferEvictionSyncs a dirty file is closed without an fsync, and
// its log's next Sync fsyncs it through the reopened file.
func TestFilesDeferredEvictionSyncs(t *testing.T) {
	fs := NewFiles(2)
	fs.DeferEvictionSyncs()
	rec := recordSyncs(fs)
	root := t.TempDir()
	a := openLog(t, filepath.Join(root, "a"), Options{Files: fs})
	syncLog(t, a)
	offs := appendN(t, a, 5)
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	b := openLog(t, filepath.Join(root, "b"), Options{Files: fs})
	appendN(t, b, 5)
	path := activePath(a)
	before := rec.count(path)
	openLog(t, filepath.Join(root, "c"), Options{Files: fs})
	if a.active().f != nil {
		t.Fatal("a's dirty file still open: want it evicted")
	}
	if got := rec.count(path); got != before {
		t.Fatalf("%s fsynced %d times on eviction, want none", path, got-before)
	}
	checkRecords(t, a, offs, 0) // reopened on a miss
	syncLog(t, a)
	if got := rec.count(path); got != before+1 {
		t.Fatalf("%s fsynced %d times by its log's Sync after eviction, want 1", path, got-before)
	}
	if got := fs.Open(); got > 2 {
		t.Fatalf("%d files open, want at most 2", got)
	}
}

func TestFilesEvictionSyncFailureIsSticky(t *testing.T) {
	fs := NewFiles(2)
	rec := recordSyncs(fs)
	root := t.TempDir()
	a := openLog(t, filepath.Join(root, "a"), Options{Files: fs})
	syncLog(t, a)
	offs := appendN(t, a, 5) // a dirty
	c := openLog(t, filepath.Join(root, "c"), Options{Files: fs})
	coffs := appendN(t, c, 3)
	syncLog(t, c) // c clean
	b := openLog(t, filepath.Join(root, "b"), Options{Files: fs})
	appendN(t, b, 5) // b dirty; c, clean, was evicted to make room for it
	if c.active().f != nil || a.active().f == nil || b.active().f == nil {
		t.Fatal("want a and b cached, c not")
	}
	injected := errors.New("injected write-back error")
	rec.failWith(activePath(a), injected)

	// A reader on another goroutine reads c: the eviction of a, the least
	// recently used dirty file, and its failed fsync happen there.
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Read(coffs[0]); err != nil {
			t.Errorf("Read: %v", err)
		}
	})
	wg.Wait()
	if rec.count(activePath(a)) != 1 || a.active().f != nil {
		t.Fatal("a was not evicted")
	}
	// Any goroutine sees it at once (a checkpoint being made checks it);
	if err := a.Failed(); !errors.Is(err, injected) {
		t.Fatalf("Failed after a failed eviction fsync: %v, want %v", err, injected)
	}
	if err := c.Failed(); err != nil {
		t.Fatalf("Failed of another log: %v", err)
	}
	// the writer's next Append, Flush and Sync return it; reads still work.
	if _, err := a.Append(payload(9)); !errors.Is(err, injected) {
		t.Fatalf("Append after a failed eviction fsync: %v, want %v", err, injected)
	}
	if err := a.Flush(); !errors.Is(err, injected) {
		t.Fatalf("Flush: %v, want %v", err, injected)
	}
	if err := a.Sync(); !errors.Is(err, injected) {
		t.Fatalf("Sync: %v, want %v", err, injected)
	}
	checkRecords(t, a, offs, 0)
	// Other logs are unaffected.
	if _, err := b.Append(payload(1)); err != nil {
		t.Fatalf("b: %v", err)
	}
	syncLog(t, b)
}

// TestFilesSyncSeesEvictionFailure checks that a writer's Sync that runs
// while an eviction fsyncs the same file does not succeed when that fsync
// fails: a write-back error may be reported to one fsync only, here the
// eviction's.
func TestFilesSyncSeesEvictionFailure(t *testing.T) {
	fs := NewFiles(1)
	root := t.TempDir()
	a := openLog(t, filepath.Join(root, "a"), Options{Files: fs})
	b := openLog(t, filepath.Join(root, "b"), Options{Files: fs})
	boffs := appendN(t, b, 1)
	syncLog(t, b)
	appendN(t, a, 3) // a dirty, cached; b not cached
	aPath := activePath(a)
	injected := errors.New("injected write-back error")
	entered, proceed := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	fs.fsync = func(f *os.File) error {
		if f.Name() == aPath && calls.Add(1) == 1 {
			close(entered)
			<-proceed
			return injected // reported to this fsync only
		}
		return f.Sync()
	}
	var wg sync.WaitGroup
	wg.Go(func() { // a reader whose miss evicts a
		if _, err := b.Read(boffs[0]); err != nil {
			t.Errorf("Read: %v", err)
		}
	})
	<-entered
	syncErr := make(chan error, 1)
	go func() { syncErr <- a.Sync() }()
	// Let the eviction's fsync fail once the writer holds the file, past
	// its check of the sticky error.
	for a.active().refs.Load() < 2 {
		runtime.Gosched()
	}
	close(proceed)
	wg.Wait()
	if err := <-syncErr; !errors.Is(err, injected) {
		t.Fatalf("Sync during the eviction's failed fsync: %v, want %v", err, injected)
	}
	if calls.Load() != 2 {
		t.Fatalf("a fsynced %d times, want 2 (the eviction's, the writer's)", calls.Load())
	}
}

func TestFilesBoundSoftWhileAllInUse(t *testing.T) {
	fs := NewFiles(2)
	root := t.TempDir()
	var held []*segment
	for i := range 4 {
		l := openLog(t, filepath.Join(root, fmt.Sprint(i)), Options{Files: fs})
		appendN(t, l, 1)
		s := l.active()
		if _, err := s.file(false); err != nil {
			t.Fatal(err)
		}
		held = append(held, s)
	}
	if got := fs.Open(); got != 4 {
		t.Fatalf("%d files open with 4 in use, want 4", got)
	}
	for _, s := range held {
		s.done()
	}
	if got := fs.Open(); got != 2 {
		t.Fatalf("%d files open after the users released them, want 2", got)
	}
}

func TestFilesRemovedSegmentClosedByLastUser(t *testing.T) {
	fs := NewFiles(8)
	const rs = recordHeader + 8
	l := openLog(t, t.TempDir(), Options{Files: fs, FixedPayload: 8, SegmentSize: 4 * rs})
	for i := range 12 {
		if _, err := l.Append(binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	first := l.segments()[0]
	f, err := first.file(false)
	if err != nil {
		t.Fatal(err)
	}
	open := fs.Open()
	if n, err := l.RemoveBefore(4 * rs); err != nil || n != 1 {
		t.Fatalf("RemoveBefore = %d, %v", n, err)
	}
	// Unlinked but still held: the file is open and reads.
	var b [rs]byte
	if _, err := f.ReadAt(b[:], headerSize); err != nil {
		t.Fatalf("read of a held removed segment: %v", err)
	}
	if _, err := l.Read(0); !errors.Is(err, ErrRetained) {
		t.Fatalf("Read of a removed segment: %v, want ErrRetained", err)
	}
	if _, err := first.file(false); !errors.Is(err, errRemoved) {
		t.Fatalf("acquire of a removed segment: %v", err)
	}
	if fs.Open() != open {
		t.Fatalf("%d files open while the removed one is held, want %d", fs.Open(), open)
	}
	first.done()
	if fs.Open() != open-1 {
		t.Fatalf("%d files open after its last user, want %d", fs.Open(), open-1)
	}
	if _, err := f.ReadAt(b[:], headerSize); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the removed segment's file is still open: %v", err)
	}
}

func TestFilesOpenChecksHeaders(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, Options{SegmentSize: 64}, 30)
	fs := NewFiles(2)
	l, err := Open(dir, KindMessage, Options{SegmentSize: 64, Files: fs})
	if err != nil {
		t.Fatal(err)
	}
	if n := l.SegmentCount(); n < 5 || fs.Open() > 2 {
		t.Fatalf("%d segments, %d files open; want several segments, at most 2 open", n, fs.Open())
	}
	l.Close()
	if fs.Open() != 0 {
		t.Fatalf("%d files open after Close", fs.Open())
	}
	path := filepath.Join(dir, segmentName(0))
	damage(t, path, func(b []byte) []byte { b[0] = 'X'; return b })
	_, err = Open(dir, KindMessage, Options{SegmentSize: 64, DurableEnd: 1, Files: fs})
	wantErr(t, err, ErrCorrupt, path, "bad magic")
	if fs.Open() != 0 {
		t.Fatalf("%d files open after a failed Open", fs.Open())
	}
}

// TestFilesRace runs readers against a writer that appends, rolls, syncs,
// truncates and removes segments of two logs sharing a cache of 2 files,
// so that nearly every use misses and evicts. A read returns the record,
// or ErrRetained; only a read that overlapped a TruncateTo (which cuts
// records readers may be reading: recovery uses it before reads start)
// may also see ErrBeyondEnd or ErrCorrupt. A file closed under a reader
// would fail with os.ErrClosed.
func TestFilesRace(t *testing.T) {
	const (
		rs      = recordHeader + 16
		readers = 3
		rounds  = 400
	)
	fs := NewFiles(2)
	root := t.TempDir()
	var logsUnderTest [2]*Log
	for i := range logsUnderTest {
		logsUnderTest[i] = openLog(t, filepath.Join(root, fmt.Sprint(i)), Options{Files: fs, FixedPayload: 16, SegmentSize: 6 * rs})
	}
	record := func(off int64, round int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(off))
		return binary.LittleEndian.AppendUint64(b, uint64(round))
	}
	var truncating atomic.Int64 // odd while a TruncateTo runs; counts them
	var stop atomic.Bool
	var maxOpen atomic.Int64
	check := func(l *Log, off int64, p []byte, err error, epoch int64) error {
		overlapped := epoch%2 == 1 || truncating.Load() != epoch
		switch {
		case err == nil:
			if got := int64(binary.LittleEndian.Uint64(p)); got != off {
				return fmt.Errorf("%s offset %d holds the record of offset %d", l.Dir(), off, got)
			}
		case errors.Is(err, ErrRetained):
		case overlapped && (errors.Is(err, ErrBeyondEnd) || errors.Is(err, ErrCorrupt)):
		default:
			return err
		}
		return nil
	}
	var wg sync.WaitGroup
	for r := range readers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for !stop.Load() {
				l := logsUnderTest[rng.IntN(2)]
				start, end := l.Start(), l.End()
				if end <= start {
					continue
				}
				epoch := truncating.Load()
				if r == 0 {
					err := l.Scan(start, func(off int64, p []byte) error { return check(l, off, p, nil, epoch) })
					if err != nil && !errors.Is(err, ErrRetained) && !(truncating.Load() != epoch || epoch%2 == 1) {
						t.Errorf("Scan: %v", err)
						return
					}
				} else {
					off := start + rng.Int64N((end-start)/rs)*rs
					var p []byte
					var err error
					if r == 1 {
						p, err = l.Read(off)
					} else {
						p, err = l.ReadSized(off, rs)
					}
					if err := check(l, off, p, err, epoch); err != nil {
						t.Errorf("read: %v", err)
						return
					}
				}
				if n := int64(fs.Open()); n > maxOpen.Load() {
					maxOpen.Store(n)
				}
			}
		})
	}
	for round := range rounds {
		for i, l := range logsUnderTest {
			for range 1 + (round+i)%4 {
				if _, err := l.Append(record(l.Next(), round)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			switch {
			case round%7 == 3:
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
			case round%11 == 5 && l.End()-l.Start() > 6*rs:
				truncating.Add(1)
				err := l.TruncateTo(l.End() - int64(1+round%5)*rs)
				truncating.Add(1)
				if err != nil {
					t.Fatal(err)
				}
			case round%5 == 1:
				if _, err := l.RemoveBefore(l.End() - 30*rs); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	// Readers hold one file each, the writer one, an eviction's fsync one.
	if got := maxOpen.Load(); got > int64(fs.Max()+readers+2) {
		t.Errorf("%d files open at once, want at most %d", got, fs.Max()+readers+2)
	}
	if got := fs.Open(); got > fs.Max() {
		t.Errorf("%d files open when idle, want at most %d", got, fs.Max())
	}
	for _, l := range logsUnderTest {
		for off := l.Start(); off < l.End(); off += rs {
			p, err := l.ReadSized(off, rs)
			if err != nil || !bytes.Equal(p[:8], binary.LittleEndian.AppendUint64(nil, uint64(off))) {
				t.Fatalf("%s: ReadSized(%d) = %x, %v", l.Dir(), off, p, err)
			}
		}
	}
}
