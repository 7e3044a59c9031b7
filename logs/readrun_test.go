package logs

import (
	"bytes"
	"errors"
	"testing"
)

// TestReadRun reads runs of records from every offset, over segment
// boundaries (segments start at records 0, 3, 5 and 7), and holds each
// payload to payload(i).
func TestReadRun(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 64})
	offs := appendN(t, l, 10)
	for from := range 10 {
		for to := from; to <= 10; to++ {
			sizes := make([]int, 0, to-from)
			for i := from; i < to; i++ {
				sizes = append(sizes, RecordSize(len(payload(i))))
			}
			got, err := l.ReadRun(offs[from], sizes)
			if err != nil {
				t.Fatalf("ReadRun(records %d..%d): %v", from, to, err)
			}
			if len(got) != to-from {
				t.Fatalf("ReadRun(records %d..%d) gave %d payloads", from, to, len(got))
			}
			for i, p := range got {
				if !bytes.Equal(p, payload(from+i)) {
					t.Fatalf("ReadRun(records %d..%d)[%d] = %q, want %q", from, to, i, p, payload(from+i))
				}
			}
		}
	}
}

func TestReadRunRefusesWhatIsNotThere(t *testing.T) {
	l := openLog(t, t.TempDir(), Options{SegmentSize: 64})
	offs := appendN(t, l, 10)
	size := func(i int) int { return RecordSize(len(payload(i))) }
	cases := []struct {
		name  string
		off   int64
		sizes []int
		want  error
	}{
		{"a size one byte short", offs[1], []int{size(1) - 1, size(2)}, ErrCorrupt},
		{"a size one byte long", offs[1], []int{size(1) + 1}, ErrCorrupt},
		{"no payload", offs[1], []int{recordHeader}, ErrRecordSize},
		{"past the end", offs[9], []int{size(9), size(9)}, ErrBeyondEnd},
		{"not at a record", offs[1] + 1, []int{size(1)}, ErrCorrupt},
	}
	for _, c := range cases {
		if _, err := l.ReadRun(c.off, c.sizes); !errors.Is(err, c.want) {
			t.Errorf("%s: ReadRun = %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := l.RemoveBefore(offs[5]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.ReadRun(offs[4], []int{size(4), size(5)}); !errors.Is(err, ErrRetained) {
		t.Errorf("a run starting in a removed segment: ReadRun = %v, want ErrRetained", err)
	}
	if got, err := l.ReadRun(offs[5], nil); err != nil || got != nil {
		t.Errorf("an empty run: ReadRun = %v, %v", got, err)
	}
}

func TestConsumeLogGetRange(t *testing.T) {
	c, err := OpenConsumeLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Log().Close()
	for i := range 20 {
		if _, err := c.Append(ConsumeEntry{Offset: int64(100 * i), Size: 10 + i, AppendedAt: int64(i), TagMask: uint64(i) << 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetRange(3, 17)
	if err != nil || len(got) != 17 {
		t.Fatalf("GetRange(3, 17) = %d entries, %v", len(got), err)
	}
	for i, e := range got {
		if want, _ := c.Get(int64(3 + i)); e != want {
			t.Fatalf("GetRange entry %d = %+v, Get gives %+v", 3+i, e, want)
		}
	}
	if _, err := c.GetRange(3, 18); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("GetRange past the end = %v, want ErrBeyondEnd", err)
	}
}
