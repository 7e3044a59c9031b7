package logs

import (
	"errors"
	"testing"
)

func consumeEntry(i int) ConsumeEntry {
	return ConsumeEntry{
		Offset:     int64(i) * 1000,
		Size:       100 + i,
		AppendedAt: 1_700_000_000_000 + int64(i),
		TagMask:    uint64(i) << 32,
	}
}

func openConsumeLog(t testing.TB, dir string, opts Options) *ConsumeLog {
	t.Helper()
	c, err := OpenConsumeLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Log().Close() })
	return c
}

func TestConsumeLog(t *testing.T) {
	const n = 25
	dir := t.TempDir()
	opts := Options{SegmentSize: 100} // rounded down to 2 entries
	c := openConsumeLog(t, dir, opts)
	for i := range n {
		if seq, err := c.Append(consumeEntry(i)); err != nil || seq != int64(i) {
			t.Fatalf("Append %d = %d, %v", i, seq, err)
		}
	}
	if err := c.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(c *ConsumeLog, from int) {
		t.Helper()
		for i := from; i < n; i++ {
			if e, err := c.Get(int64(i)); err != nil || e != consumeEntry(i) {
				t.Fatalf("Get(%d) = %+v, %v; want %+v", i, e, err, consumeEntry(i))
			}
		}
	}
	check(c, 0)
	segs := c.Log().Segments()
	if len(segs) != (n+1)/2 {
		t.Fatalf("%d segments, want %d", len(segs), (n+1)/2)
	}
	for i, s := range segs {
		if s.Base != int64(i*2*ConsumeRecordSize) {
			t.Fatalf("segment %d starts at %d, want %d", i, s.Base, i*2*ConsumeRecordSize)
		}
	}
	if c.StartSeq() != 0 || c.EndSeq() != n {
		t.Fatalf("StartSeq %d EndSeq %d", c.StartSeq(), c.EndSeq())
	}
	if _, err := c.Get(n); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("Get(EndSeq) = %v, want ErrBeyondEnd", err)
	}
	if _, err := c.Get(-1); !errors.Is(err, ErrRetained) {
		t.Fatalf("Get(-1) = %v, want ErrRetained", err)
	}

	// Retention moves StartSeq.
	if _, err := c.Log().RemoveBefore(10 * ConsumeRecordSize); err != nil {
		t.Fatal(err)
	}
	if c.StartSeq() != 10 {
		t.Fatalf("StartSeq after retention = %d, want 10", c.StartSeq())
	}
	if _, err := c.Get(9); !errors.Is(err, ErrRetained) {
		t.Fatalf("Get(9) = %v, want ErrRetained", err)
	}
	check(c, 10)

	// Reopen and continue.
	c.Log().Close()
	c = openConsumeLog(t, dir, opts)
	if c.StartSeq() != 10 || c.EndSeq() != n {
		t.Fatalf("reopened: StartSeq %d EndSeq %d", c.StartSeq(), c.EndSeq())
	}
	check(c, 10)
	if seq, err := c.Append(consumeEntry(n)); err != nil || seq != n {
		t.Fatalf("Append after reopen = %d, %v", seq, err)
	}
}

func TestConsumeLogSeqs(t *testing.T) {
	c := openConsumeLog(t, t.TempDir(), Options{SegmentSize: 4 * ConsumeRecordSize})
	for i := range 25 { // entry i points at message-log offset 1000*i
		if c.NextSeq() != int64(i) {
			t.Fatalf("NextSeq = %d, want %d", c.NextSeq(), i)
		}
		if _, err := c.Append(consumeEntry(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Rolls flushed all but the last entry.
	if c.EndSeq() != 24 || c.NextSeq() != 25 {
		t.Fatalf("before Flush: EndSeq %d NextSeq %d, want 24 25", c.EndSeq(), c.NextSeq())
	}
	if err := c.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	check := func(off, want int64) {
		t.Helper()
		if seq, err := c.SeqAtOrAfter(off); err != nil || seq != want {
			t.Fatalf("SeqAtOrAfter(%d) = %d, %v; want %d", off, seq, err, want)
		}
	}
	for _, tc := range []struct{ off, want int64 }{
		{-1, 0}, {0, 0}, {1, 1}, {999, 1}, {1000, 1}, {12_500, 13}, {24_000, 24}, {24_001, 25}, {1 << 40, 25},
	} {
		check(tc.off, tc.want)
	}
	if _, err := c.Log().RemoveBefore(10 * ConsumeRecordSize); err != nil {
		t.Fatal(err)
	}
	check(0, 8) // the first retained entry: segments hold four
	check(9000, 9)
}

func TestConsumeLogBase(t *testing.T) {
	c := openConsumeLog(t, t.TempDir(), Options{Base: 7 * ConsumeRecordSize})
	if c.StartSeq() != 7 || c.EndSeq() != 7 {
		t.Fatalf("StartSeq %d EndSeq %d, want 7 7", c.StartSeq(), c.EndSeq())
	}
	if seq, err := c.Append(consumeEntry(7)); err != nil || seq != 7 {
		t.Fatalf("Append = %d, %v; want 7", seq, err)
	}

	_, err := OpenConsumeLog(t.TempDir(), Options{Base: ConsumeRecordSize + 1})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open at a base inside an entry = %v, want ErrCorrupt", err)
	}
}

func TestRoundToRecords(t *testing.T) {
	def := Options{}.withDefaults().SegmentSize
	for _, tc := range []struct {
		size, record, want int64
	}{
		{0, 36, def / 36 * 36},
		{-5, 36, def / 36 * 36},
		{1, 36, 36},
		{36, 36, 36},
		{71, 36, 36},
		{72, 36, 72},
		{100, 32, 96},
	} {
		if got := roundToRecords(tc.size, int(tc.record)); got != tc.want {
			t.Errorf("roundToRecords(%d, %d) = %d, want %d", tc.size, tc.record, got, tc.want)
		}
	}
}
