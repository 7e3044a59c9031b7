package delaywheel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
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

// A schedule hour whose file the cache failed to fsync before evicting it
// (its write-back lost) is a failed log: Failed says so while the hour is
// open, and once the schedule has closed the hour (its close meets the
// error) Flush and Failed both return it, so the owner stops at the batch
// that closed it rather than record the hour's bytes as durable.
func TestScheduleReportsAFailedHour(t *testing.T) {
	files := logs.NewFiles(2)
	h := int64(493_000)
	files.InjectFsync(func(f *os.File) error {
		if strings.Contains(f.Name(), HourName(h)) {
			return syscall.EIO
		}
		return f.Sync()
	})
	s, err := OpenSchedule(t.TempDir(), 3, nil, files)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for k := range int64(3) { // three hours through two files: the first is evicted
		if _, err := s.Append((h+k)*HourMillis, msg(fmt.Sprint(k))); err != nil {
			t.Fatal(err)
		}
		// The flush that evicts the first hour's file may flush that hour
		// before or after: it may already see the failure.
		if err := s.Flush(); err != nil && (k < 2 || !errors.Is(err, syscall.EIO)) {
			t.Fatal(err)
		}
	}
	if err := s.Failed(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Failed = %v with hour %s's eviction fsync failed, want EIO", err, HourName(h))
	}
	// A fourth hour closes the first, the least recently used.
	if _, err := s.Append((h+3)*HourMillis, msg("3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Flush = %v after closing the failed hour, want EIO", err)
	}
	if err := s.Failed(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Failed = %v after closing the failed hour, want EIO", err)
	}
}
