package delaywheel

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// descriptorsOf returns the process's descriptors open on path.
func descriptorsOf(t *testing.T, path string) []int {
	t.Helper()
	path, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == path {
			fd, _ := strconv.Atoi(e.Name())
			out = append(out, fd)
		}
	}
	return out
}

// recordSyncfs replaces syncfs for the test: it records each descriptor
// synced, and fails with *fail when that is set.
func recordSyncfs(t *testing.T, fail *error) *[]int {
	t.Helper()
	var fds []int
	orig := syncfs
	syncfs = func(d *os.File) error {
		fds = append(fds, int(d.Fd()))
		if *fail != nil {
			return *fail
		}
		return orig(d)
	}
	t.Cleanup(func() { syncfs = orig })
	return &fds
}

// TestSyncUsesScheduleDescriptor checks that every Sync's syncfs goes
// through the one descriptor of the schedule directory opened by
// OpenSchedule: one opened afresh would not report a write-back error
// from before it was opened.
func TestSyncUsesScheduleDescriptor(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "schedule")
	var fail error
	fds := recordSyncfs(t, &fail)
	s, err := OpenSchedule(dir, 2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := descriptorsOf(t, dir)
	if len(held) != 1 {
		t.Fatalf("after OpenSchedule, descriptors %v are open on the schedule directory, want one", held)
	}
	h := int64(493_000)
	for i := range 4 { // hours closed in between: maxOpen is 2
		if _, err := s.Append((h+int64(i%3))*HourMillis, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := *fds; len(got) != i+1 || got[i] != held[0] {
			t.Fatalf("checkpoint %d synced descriptors %v, want %d", i, got, held[0])
		}
		if now := descriptorsOf(t, dir); len(now) != 1 || now[0] != held[0] {
			t.Fatalf("checkpoint %d: descriptors %v open on the schedule directory, want [%d]", i, now, held[0])
		}
	}
	// A failed syncfs fails Sync, and the next Sync tries again.
	fail = unix.EIO
	if _, err := s.Append(h*HourMillis, msg("x")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); !errors.Is(err, unix.EIO) {
		t.Fatalf("Sync with a failing syncfs: %v, want EIO", err)
	}
	fail = nil
	n := len(*fds)
	if err := s.Sync(); err != nil || len(*fds) != n+1 {
		t.Fatalf("Sync after a failure: %v, %d syncfs calls, want %d", err, len(*fds), n+1)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if now := descriptorsOf(t, dir); len(now) != 0 {
		t.Fatalf("descriptors %v still open on the schedule directory after Close", now)
	}
}

// TestOldKernelSyncsHoursFileByFile: on a kernel whose syncfs reports no
// write-back errors (before 5.8), a checkpoint does not trust one syncfs
// but fsyncs the hours it wrote, file by file.
func TestOldKernelSyncsHoursFileByFile(t *testing.T) {
	var fail error
	fds := recordSyncfs(t, &fail)
	orig := kernelRelease
	kernelRelease = func() (string, error) { return "5.4.0-150-generic", nil }
	t.Cleanup(func() { kernelRelease = orig })
	s, err := OpenSchedule(filepath.Join(t.TempDir(), "schedule"), 2, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 3 {
		if _, err := s.Append(int64(493_000+i)*HourMillis, msg(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(*fds) != 0 {
		t.Fatalf("a checkpoint on Linux 5.4 synced through syncfs(2) %d times, want none", len(*fds))
	}
}
