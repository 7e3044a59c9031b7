package delaywheel

import (
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/logs"
)

// TestScheduleThroughFileCache runs hours through a cache of two files:
// more hours are open than files, and every entry still reads back.
func TestScheduleThroughFileCache(t *testing.T) {
	files := logs.NewFiles(2)
	s, err := OpenSchedule(t.TempDir(), 6, nil, files)
	if err != nil {
		t.Fatal(err)
	}
	h := int64(493_000)
	refs := map[string]uint64{}
	for i := range 30 {
		id := fmt.Sprint(i)
		ref, err := s.Append((h+int64(i%8))*HourMillis+int64(i), msg(id))
		if err != nil {
			t.Fatal(err)
		}
		refs[id] = ref
		if i%4 == 3 {
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if i%10 == 9 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"0", "8", "17"} {
		if err := s.Dispatch(refs[id]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := files.Open(); got > 2 {
		t.Fatalf("%d files open, want at most 2", got)
	}
	for id, ref := range refs {
		if _, m, err := s.Read(ref); err != nil || m.ID != id {
			t.Fatalf("Read(%s) = %v, %v", id, m, err)
		}
	}
	for hour := h; hour < h+8; hour++ {
		for id, e := range pending(t, s, hour) {
			if e.Ref != refs[id] || id == "0" || id == "8" || id == "17" {
				t.Fatalf("hour %d: entry %s %v pending", hour, id, e)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := files.Open(); got != 0 {
		t.Fatalf("%d files open after Close", got)
	}
}
