package logs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLog creates a log in dir with n records (payload(i)), syncs and
// closes it, and returns the records' offsets and the log's end.
func writeLog(t *testing.T, dir string, opts Options, n int) ([]int64, int64) {
	t.Helper()
	l, err := Open(dir, KindMessage, opts)
	if err != nil {
		t.Fatal(err)
	}
	offs := appendN(t, l, n)
	end := l.End()
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return offs, end
}

// segPath returns the path of the segment holding offset off, given the
// segment bases of the log.
func segPath(dir string, bases []int64, off int64) (string, int64) {
	base := bases[0]
	for _, b := range bases {
		if b <= off {
			base = b
		}
	}
	return filepath.Join(dir, segmentName(base)), base
}

// damage applies f to the bytes of the file at path.
func damage(t *testing.T, path string, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// wantErr fails unless err wraps target and its message holds every one of
// parts.
func wantErr(t *testing.T, err, target error, parts ...string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

func TestRecoverTornTail(t *testing.T) {
	const n = 5
	offs, end := writeLog(t, t.TempDir(), Options{}, n)
	last := offs[n-1]
	for _, tc := range []struct {
		name string
		f    func([]byte) []byte
		end  int64 // expected End after recovery
	}{
		{"intact", func(b []byte) []byte { return b }, end},
		{"cut inside payload", func(b []byte) []byte { return b[:len(b)-3] }, last},
		{"cut inside record header", func(b []byte) []byte { return b[:headerSize+last+4] }, last},
		{"cut at record boundary", func(b []byte) []byte { return b[:headerSize+last] }, last},
		{"zeros appended", func(b []byte) []byte { return append(b, make([]byte, 100)...) }, end},
		{"garbage appended", func(b []byte) []byte { return append(b, "\x05\x00\x00\x00garbage!"...) }, end},
		{"header without payload", func(b []byte) []byte { return append(b, 10, 0, 0, 0, 1, 2, 3, 4) }, end},
		{"checksum of last record", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }, last},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, Options{}, n)
			path := filepath.Join(dir, segmentName(0))
			damage(t, path, tc.f)
			l := openLog(t, dir, Options{DurableEnd: tc.end})
			if l.End() != tc.end {
				t.Fatalf("End = %d, want %d", l.End(), tc.end)
			}
			if fileSize(path) != headerSize+tc.end {
				t.Fatalf("file holds %d bytes, want %d", fileSize(path), headerSize+tc.end)
			}
			kept := n
			if tc.end < end {
				kept = n - 1
			}
			checkRecords(t, l, offs[:kept], 0)
			if off, err := l.Append(payload(99)); err != nil || off != tc.end {
				t.Fatalf("Append = %d, %v; want %d", off, err, tc.end)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if p, err := l.Read(tc.end); err != nil || !bytes.Equal(p, payload(99)) {
				t.Fatalf("Read appended = %q, %v", p, err)
			}
		})
	}
}

func TestRecoverCorruptBelowDurableEnd(t *testing.T) {
	dir := t.TempDir()
	offs, end := writeLog(t, dir, Options{}, 5)
	path := filepath.Join(dir, segmentName(0))
	damage(t, path, func(b []byte) []byte { b[headerSize+offs[2]+recordHeader] ^= 1; return b })

	_, err := Open(dir, KindMessage, Options{DurableEnd: end})
	wantErr(t, err, ErrCorrupt, path, fmt.Sprintf("offset %d", offs[2]))
	_, err = Open(dir, KindMessage, Options{DurableEnd: offs[2] + 1})
	wantErr(t, err, ErrCorrupt, path, fmt.Sprintf("offset %d", offs[2]))

	// At or below the bad record, the damage is a torn tail.
	l := openLog(t, dir, Options{DurableEnd: offs[2]})
	if l.End() != offs[2] {
		t.Fatalf("End = %d, want %d", l.End(), offs[2])
	}
	checkRecords(t, l, offs[:2], 0)
}

func TestCorruptSealedSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 64}
	offs, _ := writeLog(t, dir, opts, 10) // segments start at records 0, 3, 5, 7
	bad := offs[4]
	path, _ := segPath(dir, []int64{0, offs[3], offs[5], offs[7]}, bad)
	damage(t, path, func(b []byte) []byte { b[headerSize+bad-offs[3]+recordHeader+2] ^= 1; return b })

	// Sealed segments are not scanned on open, even below the durable end.
	l := openLog(t, dir, Options{SegmentSize: 64, DurableEnd: offs[9]})
	where := []string{path, fmt.Sprintf("offset %d", bad)}
	_, err := l.Read(bad)
	wantErr(t, err, ErrCorrupt, where...)
	_, err = l.ReadSized(bad, RecordSize(len(payload(4))))
	wantErr(t, err, ErrCorrupt, where...)
	err = l.Scan(0, func(int64, []byte) error { return nil })
	wantErr(t, err, ErrCorrupt, where...)
	// The other records are intact.
	checkRecords(t, l, offs[:4], 0)
	checkRecords(t, l, offs, 5)

	// A damaged length is reported too.
	damage(t, path, func(b []byte) []byte { b[headerSize+bad-offs[3]] = 0xff; return b })
	_, err = l.Read(bad)
	wantErr(t, err, ErrCorrupt, where...)
}

func TestOpenGap(t *testing.T) {
	dir := t.TempDir()
	offs, _ := writeLog(t, dir, Options{SegmentSize: 64}, 10) // segments start at records 0, 3, 5, 7
	if err := os.Remove(filepath.Join(dir, segmentName(offs[3]))); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, KindMessage, Options{SegmentSize: 64})
	wantErr(t, err, ErrCorrupt, segmentName(0), fmt.Sprint(offs[5]))

	// A sealed segment that lost its tail leaves a gap as well.
	dir = t.TempDir()
	offs, _ = writeLog(t, dir, Options{SegmentSize: 64}, 10)
	damage(t, filepath.Join(dir, segmentName(offs[3])), func(b []byte) []byte { return b[:len(b)-1] })
	_, err = Open(dir, KindMessage, Options{SegmentSize: 64})
	wantErr(t, err, ErrCorrupt, segmentName(offs[3]))
}

func TestOpenBadHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind // kind the log is opened with
		f    func([]byte) []byte
		msg  string
	}{
		{"magic", KindMessage, func(b []byte) []byte { b[0] = 'X'; return b }, "bad magic"},
		{"version", KindMessage, func(b []byte) []byte { b[4] = 2; return b }, "version"},
		{"kind", KindPull, func(b []byte) []byte { return b }, "kind"},
		{"base", KindMessage, func(b []byte) []byte { b[8] = 1; return b }, "base"},
		{"truncated", KindMessage, func(b []byte) []byte { return b[:10] }, "header truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLog(t, dir, Options{}, 3)
			path := filepath.Join(dir, segmentName(0))
			damage(t, path, tc.f)
			// The records were made durable, so a short header is corruption,
			// not a segment whose creation crashed.
			_, err := Open(dir, tc.kind, Options{DurableEnd: 1})
			wantErr(t, err, ErrCorrupt, path, tc.msg)
		})
	}
}

func TestRemoveTornTrailingSegment(t *testing.T) {
	for _, size := range []int{0, 1, headerSize - 1} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentSize: 64}
			offs, end := writeLog(t, dir, opts, 10)
			// A roll that crashed before writing the new segment's header.
			torn := filepath.Join(dir, segmentName(end))
			if err := os.WriteFile(torn, make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, dir, opts)
			if _, err := os.Stat(torn); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("torn segment not removed: %v", err)
			}
			if l.End() != end || len(l.Segments()) != 4 {
				t.Fatalf("End %d with %d segments, want %d with 4", l.End(), len(l.Segments()), end)
			}
			checkRecords(t, l, offs, 0)
			// The next roll creates the segment again.
			if off, err := l.Append(payload(0)); err != nil || off != end {
				t.Fatalf("Append = %d, %v; want %d", off, err, end)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(torn); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A log whose creation crashed before its first segment's header was
// written opens as an empty log at that segment's base.
func TestRemoveTornOnlySegment(t *testing.T) {
	dir := t.TempDir()
	torn := filepath.Join(dir, segmentName(4096))
	if err := os.WriteFile(torn, []byte{'Q', 'M'}, 0o644); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, dir, Options{})
	if l.Start() != 4096 || l.End() != 4096 {
		t.Fatalf("Start %d End %d, want 4096 4096", l.Start(), l.End())
	}
	if off, err := l.Append(payload(0)); err != nil || off != 4096 {
		t.Fatalf("Append = %d, %v; want 4096", off, err)
	}
}

// A roll that crashed after the new segment's size reached the disk but
// before its header did leaves a header of zeros, or one written in part,
// possibly with records (zeros or torn) after it. Nothing in it was
// durable (DurableEnd is at or before its base), so it is a segment whose
// creation crashed: removed and created again, not a log that refuses to
// open for good. Below the durable end, or with a header that is neither
// zeros nor a part of the right one, it is corruption.
func TestRemoveTrailingSegmentWithTornHeader(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  func(good []byte) []byte
		records []byte
		durable int64 // past end: the segment held durable records
		corrupt string
	}{
		{"zeros", func([]byte) []byte { return make([]byte, headerSize) }, nil, 0, ""},
		{"zeros and zero records", func([]byte) []byte { return make([]byte, headerSize) }, make([]byte, 4096), 0, ""},
		{"zeros and a torn record", func([]byte) []byte { return make([]byte, headerSize) }, []byte{9, 0, 0, 0, 1, 2}, 0, ""},
		{"magic only", func(g []byte) []byte { return append(g[:4:4], make([]byte, headerSize-4)...) }, make([]byte, 100), 0, ""},
		{"all but the base", func(g []byte) []byte { return append(g[:8:8], make([]byte, headerSize-8)...) }, nil, 0, ""},
		{"zeros below the durable end", func([]byte) []byte { return make([]byte, headerSize) }, make([]byte, 100), 1, "bad magic"},
		{"garbage", func(g []byte) []byte { return bytes.Repeat([]byte{0xa5}, headerSize) }, nil, 0, "bad magic"},
		{"another kind", func(g []byte) []byte { g = bytes.Clone(g); g[5] = byte(KindPull); return g }, nil, 0, "kind"},
		{"another base", func(g []byte) []byte { g = bytes.Clone(g); g[8]++; return g }, nil, 0, "base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{SegmentSize: 64}
			offs, end := writeLog(t, dir, opts, 10)
			torn := filepath.Join(dir, segmentName(end))
			if err := os.WriteFile(torn, append(tc.header(encodeHeader(KindMessage, end)), tc.records...), 0o644); err != nil {
				t.Fatal(err)
			}
			opts.DurableEnd = end + tc.durable
			l, err := Open(dir, KindMessage, opts)
			if tc.corrupt != "" {
				wantErr(t, err, ErrCorrupt, torn, tc.corrupt)
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer l.Close()
			if l.End() != end {
				t.Fatalf("End %d, want %d", l.End(), end)
			}
			checkRecords(t, l, offs, 0)
			if off, err := l.Append(payload(0)); err != nil || off != end {
				t.Fatalf("Append = %d, %v; want %d", off, err, end)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			l.Close()
			l2 := openLog(t, dir, Options{SegmentSize: 64, DurableEnd: end + int64(RecordSize(len(payload(0))))})
			if p, err := l2.Read(end); err != nil || !bytes.Equal(p, payload(0)) {
				t.Fatalf("Read after reopening = %q, %v", p, err)
			}
		})
	}
}
