package logs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// openLog opens a log of kind KindMessage in dir and closes it at the end
// of the test.
func openLog(t testing.TB, dir string, opts Options) *Log {
	t.Helper()
	l, err := Open(dir, KindMessage, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// payload returns a deterministic payload of variable size for record i.
func payload(i int) []byte {
	return []byte(fmt.Sprintf("record-%04d-%s", i, strings.Repeat("x", i%7)))
}

// appendN appends n records (payload(0..n-1)), flushes, and returns their
// offsets.
func appendN(t testing.TB, l *Log, n int) []int64 {
	t.Helper()
	offs := make([]int64, n)
	for i := range n {
		off, err := l.Append(payload(i))
		if err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
		offs[i] = off
	}
	if err := l.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return offs
}

// checkRecords reads records i >= from of offs (via Read and ReadSized)
// and compares them with payload(i).
func checkRecords(t *testing.T, l *Log, offs []int64, from int) {
	t.Helper()
	for i := from; i < len(offs); i++ {
		off, want := offs[i], payload(i)
		got, err := l.Read(off)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Read(%d) = %q, %v; want %q", off, got, err, want)
		}
		got, err = l.ReadSized(off, RecordSize(len(want)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("ReadSized(%d) = %q, %v; want %q", off, got, err, want)
		}
	}
}

// segBases returns the base offsets of l's segments.
func segBases(l *Log) []int64 {
	var bases []int64
	for _, s := range l.Segments() {
		bases = append(bases, s.Base)
	}
	return bases
}

func TestAppendFlushRead(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	if l.Start() != 0 || l.End() != 0 {
		t.Fatalf("empty log: Start %d End %d", l.Start(), l.End())
	}
	off, err := l.Append(payload(0))
	if err != nil || off != 0 {
		t.Fatalf("Append = %d, %v", off, err)
	}
	// Not visible before Flush.
	if _, err := l.Read(0); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("Read before Flush: %v, want ErrBeyondEnd", err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := int64(RecordSize(len(payload(0)))); l.End() != want {
		t.Fatalf("End = %d, want %d", l.End(), want)
	}
	offs := append([]int64{0}, make([]int64, 9)...)
	for i := 1; i < 10; i++ {
		if offs[i], err = l.Append(payload(i)); err != nil {
			t.Fatal(err)
		}
		if want := offs[i-1] + int64(RecordSize(len(payload(i-1)))); offs[i] != want {
			t.Fatalf("offset %d = %d, want %d", i, offs[i], want)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, l, offs, 0)
}

func TestReadSized(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{MaxPayload: 100})
	offs := appendN(t, l, 3)
	size := RecordSize(len(payload(0)))
	for _, tc := range []struct {
		name string
		off  int64
		size int
		want error
	}{
		{"exact", offs[0], size, nil},
		{"header only", offs[0], recordHeader, ErrRecordSize},
		{"zero", offs[0], 0, ErrRecordSize},
		{"above max payload", offs[0], RecordSize(101), ErrRecordSize},
		{"too small", offs[0], size - 1, ErrCorrupt},
		{"too large", offs[0], size + 1, ErrCorrupt},
		{"past end", offs[2], RecordSize(len(payload(2))) + 1, ErrBeyondEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.ReadSized(tc.off, tc.size)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("ReadSized(%d, %d) = %v, want %v", tc.off, tc.size, err, tc.want)
			}
		})
	}
}

func TestBaseStartEnd(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Base: 1000})
	if l.Start() != 1000 || l.End() != 1000 {
		t.Fatalf("Start %d End %d, want 1000 1000", l.Start(), l.End())
	}
	if off, err := l.Append(payload(0)); err != nil || off != 1000 {
		t.Fatalf("Append = %d, %v; want 1000", off, err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(999); !errors.Is(err, ErrRetained) {
		t.Fatalf("Read before Start: %v, want ErrRetained", err)
	}
	if _, err := os.Stat(filepath.Join(l.Dir(), "00000000000000001000.seg")); err != nil {
		t.Fatal(err)
	}
}

func TestRoll(t *testing.T) {
	dir := t.TempDir()
	// 20-byte payloads make 28-byte records: three fit in 100 bytes.
	l := openLog(t, dir, Options{SegmentSize: 100})
	var offs []int64
	for i := range 10 {
		off, err := l.Append(bytes.Repeat([]byte{byte(i)}, 20))
		if err != nil {
			t.Fatal(err)
		}
		if off != int64(i*28) {
			t.Fatalf("offset %d = %d, want %d", i, off, i*28)
		}
		offs = append(offs, off)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	wantBases := []int64{0, 84, 168, 252}
	if got := segBases(l); !slices.Equal(got, wantBases) {
		t.Fatalf("segment bases %v, want %v", got, wantBases)
	}
	var names []string
	for _, b := range wantBases {
		names = append(names, fmt.Sprintf("%020d.seg", b))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, names) {
		t.Fatalf("files %v, want %v", got, names)
	}
	for i, off := range offs {
		p, err := l.ReadSized(off, 28)
		if err != nil || !bytes.Equal(p, bytes.Repeat([]byte{byte(i)}, 20)) {
			t.Fatalf("ReadSized(%d) = %v, %v", off, p, err)
		}
	}
	if l.End() != 280 {
		t.Fatalf("End = %d, want 280", l.End())
	}
	// A record larger than a segment gets a segment of its own.
	if off, err := l.Append(make([]byte, 200)); err != nil || off != 280 {
		t.Fatalf("big Append = %d, %v", off, err)
	}
	if off, err := l.Append(payload(0)); err != nil || off != 488 {
		t.Fatalf("Append after big = %d, %v", off, err)
	}
	l.Flush()
	if got := segBases(l); !slices.Equal(got, []int64{0, 84, 168, 252, 280, 488}) {
		t.Fatalf("segment bases %v", got)
	}
}

// A segment size set on an open log applies from the next Append: an
// active segment already past a smaller size is sealed by it, and a larger
// one lets the active segment grow to it; reopened with the new size, the
// log rolls where the live one does.
func TestSetSegmentSize(t *testing.T) {
	dir := t.TempDir()
	// 20-byte payloads make 28-byte records.
	l := openLog(t, dir, Options{SegmentSize: 100})
	rec := func() {
		t.Helper()
		if _, err := l.Append(bytes.Repeat([]byte{1}, 20)); err != nil {
			t.Fatal(err)
		}
	}
	rec()
	rec() // 56 bytes in the first segment
	l.SetSegmentSize(50)
	rec() // past 50: a new segment at 56
	l.SetSegmentSize(200)
	for range 7 { // 196 bytes in the segment at 56
		rec()
	}
	rec() // past 200: a new segment at 252
	l.Flush()
	if got, want := segBases(l), []int64{0, 56, 252}; !slices.Equal(got, want) {
		t.Fatalf("segment bases %v, want %v", got, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, Options{SegmentSize: 200})
	for range 7 {
		rec()
	}
	l.Flush()
	if got, want := segBases(l), []int64{0, 56, 252, 448}; !slices.Equal(got, want) {
		t.Fatalf("after reopening: segment bases %v, want %v", got, want)
	}
}

func TestScan(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 64})
	offs := appendN(t, l, 20)
	if len(l.Segments()) < 3 {
		t.Fatalf("want several segments, got %d", len(l.Segments()))
	}
	errStop := errors.New("stop")
	for _, tc := range []struct {
		name  string
		from  int
		stop  int // fn returns errStop at this record (-1: never)
		want  error
		calls int
	}{
		{"all", 0, -1, nil, 20},
		{"from middle", 11, -1, nil, 9},
		{"from last", 19, -1, nil, 1},
		{"from end", 20, -1, nil, 0},
		{"stop", 0, 5, errStop, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := l.End()
			if tc.from < len(offs) {
				from = offs[tc.from]
			}
			i := tc.from
			err := l.Scan(from, func(off int64, p []byte) error {
				if off != offs[i] || !bytes.Equal(p, payload(i)) {
					t.Fatalf("record %d: got (%d, %q), want (%d, %q)", i, off, p, offs[i], payload(i))
				}
				i++
				if i-1 == tc.stop {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Scan = %v, want %v", err, tc.want)
			}
			if i-tc.from != tc.calls {
				t.Fatalf("fn called %d times, want %d", i-tc.from, tc.calls)
			}
		})
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, KindMessage, Options{SegmentSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	offs := appendN(t, l, 15)
	last, err := l.Append(payload(15)) // buffered: Close flushes it
	if err != nil {
		t.Fatal(err)
	}
	offs = append(offs, last)
	segs, end := l.Segments(), l.End()+int64(RecordSize(len(payload(15))))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(payload(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: %v, want ErrClosed", err)
	}

	l = openLog(t, dir, Options{SegmentSize: 64})
	if l.End() != end || l.Start() != 0 {
		t.Fatalf("reopened: Start %d End %d, want 0 %d", l.Start(), l.End(), end)
	}
	if got := segBases(l); len(got) != len(segs) {
		t.Fatalf("reopened with %d segments, want %d", len(got), len(segs))
	}
	checkRecords(t, l, offs, 0)
	if off, err := l.Append(payload(16)); err != nil || off != end {
		t.Fatalf("Append after reopen = %d, %v; want %d", off, err, end)
	}
}

func TestSync(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentSize: 64})
	appendN(t, l, 3)
	if _, err := l.Append(payload(3)); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	segs := l.Segments()
	a := segs[len(segs)-1]
	if a.Base+a.Size != l.End() {
		t.Fatalf("Sync did not flush: active ends at %d, End %d", a.Base+a.Size, l.End())
	}
	if fi, err := os.Stat(a.Path); err != nil || fi.Size() != headerSize+a.Size {
		t.Fatalf("active segment file: %v, %v; want %d bytes", fi, err, headerSize+a.Size)
	}
	if _, err := l.RemoveBefore(l.End()); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil { // syncs the directory too
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil { // nothing to do
		t.Fatal(err)
	}
}

func TestTruncateTo(t *testing.T) {
	// Records 0..9 of payload(i) (20+i%7 bytes each) with SegmentSize 64
	// lie in segments [0 1 2] [3 4] [5 6] [7 8 9].
	const n = 10
	for _, tc := range []struct {
		name string
		keep int // records kept
		segs int // segments left
	}{
		{"nothing", n, 4},
		{"within active", 9, 4},
		{"active emptied", 7, 3}, // 7 starts the last segment: exactly at a boundary
		{"into earlier segment", 4, 2},
		{"at first boundary", 3, 1},
		{"everything", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openLog(t, dir, Options{SegmentSize: 64})
			offs := appendN(t, l, n)
			if got := segBases(l); !slices.Equal(got, []int64{0, offs[3], offs[5], offs[7]}) {
				t.Fatalf("segment bases %v, offsets %v", got, offs)
			}
			end := l.End()
			if tc.keep < n {
				end = offs[tc.keep]
			}
			if err := l.TruncateTo(end); err != nil {
				t.Fatal(err)
			}
			if l.End() != end || len(l.Segments()) != tc.segs {
				t.Fatalf("End %d with %d segments, want %d with %d", l.End(), len(l.Segments()), end, tc.segs)
			}
			checkRecords(t, l, offs[:tc.keep], 0)
			for _, off := range offs[tc.keep:] {
				if _, err := l.Read(off); !errors.Is(err, ErrBeyondEnd) {
					t.Fatalf("Read(%d) after truncate: %v, want ErrBeyondEnd", off, err)
				}
			}
			// Appending again reuses the truncated offsets.
			for i := tc.keep; i < n; i++ {
				if off, err := l.Append(payload(i)); err != nil || off != offs[i] {
					t.Fatalf("re-Append %d = %d, %v; want %d", i, off, err, offs[i])
				}
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			checkRecords(t, l, offs, 0)
			l.Close()
			l = openLog(t, dir, Options{SegmentSize: 64})
			checkRecords(t, l, offs, 0)
		})
	}
}

func TestTruncateToOutOfRange(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{Base: 100})
	appendN(t, l, 2)
	for _, end := range []int64{99, l.End() + 1} {
		if err := l.TruncateTo(end); err == nil {
			t.Fatalf("TruncateTo(%d) succeeded", end)
		}
	}
	// The log still works.
	if _, err := l.Append(payload(2)); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveBefore(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentSize: 64})
	offs := appendN(t, l, 10) // segments start at records 0, 3, 5, 7
	if n, err := l.RemoveBefore(offs[2]); err != nil || n != 0 {
		t.Fatalf("RemoveBefore inside the first segment = %d, %v; want 0", n, err)
	}
	if n, err := l.RemoveBefore(offs[6]); err != nil || n != 2 {
		t.Fatalf("RemoveBefore = %d, %v; want 2", n, err)
	}
	if l.Start() != offs[5] {
		t.Fatalf("Start = %d, want %d", l.Start(), offs[5])
	}
	for _, off := range offs[:5] {
		if _, err := l.Read(off); !errors.Is(err, ErrRetained) {
			t.Fatalf("Read(%d) = %v, want ErrRetained", off, err)
		}
	}
	if err := l.Scan(0, func(int64, []byte) error { return nil }); !errors.Is(err, ErrRetained) {
		t.Fatalf("Scan(0) = %v, want ErrRetained", err)
	}
	checkRecords(t, l, offs, 5)
	for _, base := range []int64{0, offs[3]} {
		if _, err := os.Stat(filepath.Join(dir, segmentName(base))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("segment %d still exists: %v", base, err)
		}
	}

	// The active segment is never removed.
	if n, err := l.RemoveBefore(l.End() + 1000); err != nil || n != 1 {
		t.Fatalf("RemoveBefore(past end) = %d, %v; want 1", n, err)
	}
	if len(l.Segments()) != 1 || l.Start() != offs[7] {
		t.Fatalf("after removing all sealed: %d segments, Start %d", len(l.Segments()), l.Start())
	}
	checkRecords(t, l, offs, 7)
	l.Sync()
	l.Close()
	l = openLog(t, dir, Options{SegmentSize: 64})
	if l.Start() != offs[7] {
		t.Fatalf("reopened Start = %d, want %d", l.Start(), offs[7])
	}
}

func TestBeyondEnd(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{})
	offs := appendN(t, l, 2)
	for _, off := range []int64{l.End(), l.End() + 1, l.End() + 1000} {
		if _, err := l.Read(off); !errors.Is(err, ErrBeyondEnd) {
			t.Fatalf("Read(%d) = %v, want ErrBeyondEnd", off, err)
		}
		if _, err := l.ReadSized(off, 20); !errors.Is(err, ErrBeyondEnd) {
			t.Fatalf("ReadSized(%d) = %v, want ErrBeyondEnd", off, err)
		}
	}
	if _, err := l.ReadSized(offs[1], int(l.End()-offs[1])+1); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("ReadSized straddling the end = %v, want ErrBeyondEnd", err)
	}
}

func TestRecordSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		n    int
		ok   bool
	}{
		{"empty", Options{}, 0, false},
		{"max", Options{MaxPayload: 50}, 50, true},
		{"oversize", Options{MaxPayload: 50}, 51, false},
		{"fixed", Options{FixedPayload: 8}, 8, true},
		{"fixed short", Options{FixedPayload: 8}, 7, false},
		{"fixed long", Options{FixedPayload: 8}, 9, false},
		{"fixed empty", Options{FixedPayload: 8}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLog(t, t.TempDir(), tc.opts)
			_, err := l.Append(make([]byte, tc.n))
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrRecordSize)) {
				t.Fatalf("Append(%d bytes) = %v, ok %v", tc.n, err, tc.ok)
			}
			if !tc.ok && l.Flush() == nil && l.End() != 0 {
				t.Fatalf("a refused record was written: End %d", l.End())
			}
		})
	}
}

// TestConcurrentReaders runs readers while one writer appends, rolls and
// flushes. Run it with -race.
func TestConcurrentReaders(t *testing.T) {
	const n = 3000
	const rs = recordHeader + 8
	l := openLog(t, t.TempDir(), Options{FixedPayload: 8, SegmentSize: 16 * rs})
	check := func(i int, p []byte) error {
		if got := binary.LittleEndian.Uint64(p); got != uint64(i) {
			return fmt.Errorf("record %d holds %d", i, got)
		}
		return nil
	}
	var wg sync.WaitGroup
	// A reader that reads every record below the published end.
	wg.Go(func() {
		for i := 0; i < n; {
			end := l.End()
			for ; int64(i*rs) < end; i++ {
				p, err := l.Read(int64(i * rs))
				if err == nil {
					err = check(i, p)
				}
				if err != nil {
					t.Errorf("Read(%d): %v", i*rs, err)
					return
				}
			}
			runtime.Gosched()
		}
	})
	// A tailing reader that polls the next offset until it appears.
	wg.Go(func() {
		for i := 0; i < n; {
			p, err := l.ReadSized(int64(i*rs), rs)
			switch {
			case errors.Is(err, ErrBeyondEnd):
				runtime.Gosched()
				continue
			case err == nil:
				err = check(i, p)
			}
			if err != nil {
				t.Errorf("ReadSized(%d): %v", i*rs, err)
				return
			}
			i++
		}
	})
	// A scanner that follows the log with Scan.
	wg.Go(func() {
		var next int64
		for next < n*rs {
			err := l.Scan(next, func(off int64, p []byte) error {
				if off != next {
					return fmt.Errorf("Scan gave offset %d, want %d", off, next)
				}
				next += rs
				return check(int(off/rs), p)
			})
			if err != nil {
				t.Errorf("Scan: %v", err)
				return
			}
			runtime.Gosched()
		}
	})
	for i := range n {
		if _, err := l.Append(binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// TestReadersDuringRemoval checks that a reader racing retention gets the
// record or ErrRetained, never another error.
func TestReadersDuringRemoval(t *testing.T) {
	const n = 2000
	const rs = recordHeader + 8
	l := openLog(t, t.TempDir(), Options{FixedPayload: 8, SegmentSize: 8 * rs})
	for i := range n {
		if _, err := l.Append(binary.LittleEndian.AppendUint64(nil, uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if _, err := l.Read(int64(i * rs)); err != nil && !errors.Is(err, ErrRetained) {
				t.Errorf("Read(%d): %v", i*rs, err)
				return
			}
		}
	})
	wg.Go(func() {
		for l.Start() < (n-8)*rs {
			err := l.Scan(l.Start(), func(int64, []byte) error { return nil })
			if err != nil && !errors.Is(err, ErrRetained) {
				t.Errorf("Scan: %v", err)
				return
			}
		}
	})
	for off := int64(0); off < n*rs; off += rs {
		if _, err := l.RemoveBefore(off); err != nil {
			t.Fatal(err)
		}
		if off%(64*rs) == 0 {
			runtime.Gosched()
		}
	}
	wg.Wait()
}

func TestNext(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 64, Base: 10})
	if l.Next() != 10 {
		t.Fatalf("Next of an empty log = %d, want 10", l.Next())
	}
	for i := range 10 { // rolls on the way
		next := l.Next()
		off, err := l.Append(payload(i))
		if err != nil || off != next {
			t.Fatalf("Append %d = %d, %v; Next said %d", i, off, err, next)
		}
	}
	if l.End() == l.Next() {
		t.Fatal("End counts unflushed records")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if l.End() != l.Next() {
		t.Fatalf("after Flush: End %d, Next %d", l.End(), l.Next())
	}
}

// TestSegmentFiles lists a closed log's segments without opening it, up
// to a given end: bytes after it (a torn or later tail) are left out, and
// an end the files do not reach is an error.
func TestSegmentFiles(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, Options{SegmentSize: 100})
	var ends []int64
	for range 6 {
		if _, err := l.Append(make([]byte, 40)); err != nil {
			t.Fatal(err)
		}
		l.Flush()
		ends = append(ends, l.End())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	all, err := SegmentFiles(dir, ends[5])
	if err != nil || len(all) < 2 {
		t.Fatalf("SegmentFiles at the end: %v, %v", all, err)
	}
	last := all[len(all)-1]
	if last.Base+last.Size != ends[5] || last.FileSize != headerSize+last.Size {
		t.Fatalf("last segment %+v, log ends at %d", last, ends[5])
	}
	cut, err := SegmentFiles(dir, ends[2])
	if err != nil {
		t.Fatal(err)
	}
	if got := cut[len(cut)-1]; got.Base+got.Size != ends[2] || len(cut) > len(all) {
		t.Fatalf("SegmentFiles(%d) = %+v", ends[2], cut)
	}
	if _, err := SegmentFiles(dir, ends[5]+48); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an end past the files: %v, want ErrCorrupt", err)
	}
}
