package logs

import (
	"errors"
	"slices"
	"testing"
)

// pullEntry returns the i-th entry of a pull log shared by three
// consumers taking turns: consumer i%3 pulls consume sequence 100+i as its
// pull sequence i/3.
func pullEntry(i int) PullEntry {
	return PullEntry{Consumer: uint32(i % 3), PullSeq: int64(i / 3), ConsumeSeq: int64(100 + i)}
}

func openPullLog(t testing.TB, dir string, opts Options) *PullLog {
	t.Helper()
	p, err := OpenPullLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Log().Close() })
	return p
}

func TestPullLog(t *testing.T) {
	const n = 30
	dir := t.TempDir()
	opts := Options{SegmentSize: 4*PullRecordSize + 1} // 4 entries a segment
	p := openPullLog(t, dir, opts)
	for i := range n {
		if pos, err := p.Append(pullEntry(i)); err != nil || pos != int64(i) {
			t.Fatalf("Append %d = %d, %v", i, pos, err)
		}
	}
	if err := p.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	if segs := p.Log().Segments(); len(segs) != (n+3)/4 || segs[1].Base != 4*PullRecordSize {
		t.Fatalf("segments %+v", segs)
	}
	for i := range n {
		if e, err := p.Get(int64(i)); err != nil || e != pullEntry(i) {
			t.Fatalf("Get(%d) = %+v, %v", i, e, err)
		}
	}
	if _, err := p.Get(n); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("Get(%d) = %v, want ErrBeyondEnd", n, err)
	}

	for _, from := range []int{0, 5, n - 1, n} {
		next := from
		err := p.Scan(int64(from), func(pos int64, e PullEntry) error {
			if pos != int64(next) || e != pullEntry(next) {
				t.Fatalf("Scan from %d: entry %d = %+v, want %d %+v", from, pos, e, next, pullEntry(next))
			}
			next++
			return nil
		})
		if err != nil || next != n {
			t.Fatalf("Scan from %d = %v, stopped at %d", from, err, next)
		}
	}

	p.Log().Close()
	p = openPullLog(t, dir, opts)
	if pos, err := p.Append(pullEntry(n)); err != nil || pos != n {
		t.Fatalf("Append after reopen = %d, %v", pos, err)
	}
	if err := p.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	if e, err := p.Get(n); err != nil || e != pullEntry(n) {
		t.Fatalf("Get(%d) after reopen = %+v, %v", n, e, err)
	}
}

func TestConsumerLog(t *testing.T) {
	p := openPullLog(t, t.TempDir(), Options{SegmentSize: 64})
	for i := range 30 {
		if _, err := p.Append(pullEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	// want returns consumer c's consume sequences from pull sequence from,
	// among entries at positions >= start.
	want := func(c uint32, start, from int) []int64 {
		var seqs []int64
		for i := start; i < 30; i++ {
			if e := pullEntry(i); e.Consumer == c && e.PullSeq >= int64(from) {
				seqs = append(seqs, e.ConsumeSeq)
			}
		}
		return seqs
	}
	for _, tc := range []struct {
		consumer    uint32
		start, from int
	}{
		{0, 0, 0}, {1, 0, 0}, {2, 0, 4}, {1, 12, 0}, {1, 12, 8}, {0, 0, 10}, {7, 0, 0},
	} {
		got, err := p.ConsumerLog(tc.consumer, int64(tc.start), int64(tc.from))
		if err != nil {
			t.Fatal(err)
		}
		if w := want(tc.consumer, tc.start, tc.from); !slices.Equal(got, w) {
			t.Errorf("ConsumerLog(%d, %d, %d) = %v, want %v", tc.consumer, tc.start, tc.from, got, w)
		}
	}
	if _, err := p.Log().RemoveBefore(p.Log().End()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ConsumerLog(0, 0, 0); !errors.Is(err, ErrRetained) {
		t.Fatalf("ConsumerLog from a removed position = %v, want ErrRetained", err)
	}
}
