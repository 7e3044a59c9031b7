package logs

import (
	"bytes"
	"testing"
)

// TestFlushStartsWriteback checks where Flush asks the device to write the
// active segment's pages: once a mebibyte has piled up since the last
// request, up to the end, and from the start of a new segment after a
// roll.
func TestFlushStartsWriteback(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 3 << 20})
	record := bytes.Repeat([]byte("w"), 100<<10)
	appendFlush := func(n int) {
		t.Helper()
		for range n {
			if _, err := l.Append(record); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	appendFlush(5) // 0.5 MiB: not yet
	if l.writtenBack != 0 {
		t.Fatalf("written back to %d after half a mebibyte", l.writtenBack)
	}
	appendFlush(6) // past 1 MiB: all of it
	if want := l.active().end(); l.writtenBack != want {
		t.Fatalf("written back to %d, want the end %d", l.writtenBack, want)
	}
	appendFlush(30) // rolls into a new segment
	a := l.active()
	if len(l.Segments()) < 2 || l.writtenBack < a.base || l.writtenBack > a.end() {
		t.Fatalf("after a roll: written back to %d, active segment %d..%d", l.writtenBack, a.base, a.end())
	}
}
