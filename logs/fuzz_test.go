package logs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recoveryRecords is the number of records the segment of FuzzRecovery
// holds before it is damaged.
const recoveryRecords = 8

// recordOffsets returns the offsets of records payload(0..n-1) in a log
// starting at 0, and the offset just past them.
func recordOffsets(n int) ([]int64, int64) {
	offs := make([]int64, n)
	var end int64
	for i := range offs {
		offs[i] = end
		end += int64(RecordSize(len(payload(i))))
	}
	return offs, end
}

// FuzzRecovery damages the tail of a segment holding valid records: from
// position pos (in record bytes) it writes tail over the file, after
// truncating it there if cut is set. Open must then either fail with
// ErrCorrupt (only allowed when the damage lies below DurableEnd, which is
// the records' end if durable is set) or recover a log whose records before
// the damage are intact and whose end is a record boundary.
func FuzzRecovery(f *testing.F) {
	offs, end := recordOffsets(recoveryRecords)
	mid := uint16(offs[3] + 5)
	f.Add(uint16(end), []byte(nil), false, false)                       // no damage
	f.Add(uint16(end-3), []byte(nil), true, false)                      // torn payload
	f.Add(uint16(offs[5]+2), []byte(nil), true, false)                  // torn record header
	f.Add(uint16(0), []byte(nil), true, false)                          // empty
	f.Add(uint16(end), make([]byte, 100), false, false)                 // zeros appended
	f.Add(uint16(end), []byte("\x05\x00\x00\x00garbage"), false, false) // garbage appended
	f.Add(mid, []byte{0xff}, false, false)                              // flipped byte
	f.Add(mid, []byte{0xff}, false, true)                               // ... below the durable end
	f.Add(uint16(offs[3]), []byte(nil), true, true)                     // clean cut below the durable end
	f.Add(uint16(offs[2]), []byte{0xff, 0xff, 0xff, 0x7f}, false, false)
	f.Add(uint16(offs[6]), []byte{1, 0, 0, 0, 0x4b, 0x44, 0x8a, 0xa4, 'x'}, true, false)
	f.Fuzz(func(t *testing.T, pos uint16, tail []byte, cut, durable bool) {
		at := int64(pos) % (end + 1)
		dir := t.TempDir()
		opts := Options{MaxPayload: 64}
		writeLog(t, dir, opts, recoveryRecords)
		path := filepath.Join(dir, segmentName(0))
		file, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cut {
			err = file.Truncate(headerSize + at)
		}
		if _, werr := file.WriteAt(tail, headerSize+at); err == nil {
			err = werr
		}
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		damaged := len(tail) > 0 || (cut && at < end)
		if durable {
			opts.DurableEnd = end
		}

		l, err := Open(dir, KindMessage, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || !durable || !damaged || at >= end || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open (damage at %d, durable %v): %v", at, durable, err)
			}
			return
		}
		defer l.Close()
		intact := 0 // records that end at or before the damage
		for intact < recoveryRecords && (!damaged || offs[intact]+int64(RecordSize(len(payload(intact)))) <= at) {
			intact++
		}
		minEnd := end
		if intact < recoveryRecords {
			minEnd = offs[intact]
		}
		// (A cut exactly at a record boundary below DurableEnd is not
		// detected by Open: no record is bad. The owner's TruncateTo to its
		// durable end then fails.)
		if l.End() < minEnd {
			t.Fatalf("End %d, want at least %d", l.End(), minEnd)
		}
		checkRecords(t, l, offs[:intact], 0)
		next := l.Start()
		err = l.Scan(l.Start(), func(off int64, p []byte) error {
			if off != next {
				t.Fatalf("Scan: record at %d, want %d", off, next)
			}
			next += int64(RecordSize(len(p)))
			return nil
		})
		if err != nil || next != l.End() {
			t.Fatalf("Scan = %v, ended at %d, End %d", err, next, l.End())
		}

		// The recovered log takes appends, and keeps them across a reopen.
		newEnd := l.End()
		if off, err := l.Append(payload(99)); err != nil || off != newEnd {
			t.Fatalf("Append = %d, %v; want %d", off, err, newEnd)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		l, err = Open(dir, KindMessage, Options{MaxPayload: 64, DurableEnd: newEnd + 1})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if p, err := l.Read(newEnd); err != nil || !bytes.Equal(p, payload(99)) {
			t.Fatalf("Read appended = %q, %v", p, err)
		}
	})
}

// FuzzRecoveryHeader writes a trailing segment whose header is header (as
// much of it as is given) followed by records, after a sealed segment of
// valid records. Open must keep the sealed records whatever it finds; it
// must remove the trailing segment when nothing in it was durable and its
// header is torn (short, or each byte zero or the right one), open it when
// its header is right, and otherwise refuse with ErrCorrupt naming it.
func FuzzRecoveryHeader(f *testing.F) {
	good := encodeHeader(KindMessage, 1)
	f.Add([]byte(nil), []byte(nil), false)
	f.Add(make([]byte, headerSize), make([]byte, 64), false)
	f.Add(make([]byte, headerSize), make([]byte, 64), true)
	f.Add(good[:7], []byte(nil), false)
	f.Add(append(good[:6:6], make([]byte, 10)...), []byte{3, 0, 0, 0}, false)
	f.Add(good, []byte(nil), true)
	f.Add(bytes.Repeat([]byte{0xff}, headerSize), []byte(nil), false)
	f.Add([]byte("00"), []byte("00000000000000"), false)                               // records fill a short header
	f.Add([]byte("QMQL\x01\x0100\xe0\x00\x00\x00\x00\x00\x00\x00"), []byte(nil), true) // reserved bytes unchecked
	f.Fuzz(func(t *testing.T, header, records []byte, durable bool) {
		if len(header) > headerSize {
			header = header[:headerSize]
		}
		dir := t.TempDir()
		opts := Options{SegmentSize: 64, MaxPayload: 64}
		offs, end := writeLog(t, dir, opts, 10)
		want := encodeHeader(KindMessage, end)
		if len(header) == headerSize && bytes.Equal(header[8:], good[8:]) {
			copy(header[8:], want[8:]) // a seed's "right base" is this log's
		}
		path := filepath.Join(dir, segmentName(end))
		if durable {
			opts.DurableEnd = end + 1
		}
		// What Open finds where the header should be: records fill in a
		// short header.
		file := append(bytes.Clone(header), records...)
		header = file[:min(len(file), headerSize)]
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		torn := len(header) < headerSize
		if !torn {
			torn = !bytes.Equal(header, want)
			for i := range header {
				if header[i] != 0 && header[i] != want[i] {
					torn = false
				}
			}
		}
		// openSegment checks every byte but the two reserved ones.
		right := len(header) == headerSize && bytes.Equal(header[:6], want[:6]) && bytes.Equal(header[8:], want[8:])
		l, err := Open(dir, KindMessage, opts)
		switch {
		case err != nil:
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open: %v, not ErrCorrupt naming %s", err, path)
			}
			if right && !durable {
				t.Fatalf("Open refused a right header with nothing durable after it: %v", err)
			}
			if torn && !durable {
				t.Fatalf("Open refused a torn header with nothing durable after it: %v", err)
			}
			return
		case !right && !(torn && !durable):
			t.Fatalf("Open accepted header %x (right: %x, durable %v)", header, want, durable)
		}
		defer l.Close()
		if l.End() < end {
			t.Fatalf("End %d, below the sealed records' end %d", l.End(), end)
		}
		checkRecords(t, l, offs, 0)
		next := l.End()
		if off, err := l.Append(payload(1)); err != nil || off != next {
			t.Fatalf("Append = %d, %v; want %d", off, err, next)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	})
}
