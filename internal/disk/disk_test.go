package disk

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFree(t *testing.T) {
	dir := t.TempDir()
	free, err := Free(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free <= 0 {
		t.Fatalf("Free(%s) = %d, want a positive count", dir, free)
	}
	// A file reports its file system too.
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := Free(file); err != nil || n <= 0 {
		t.Fatalf("Free(%s) = %d, %v", file, n, err)
	}
	if _, err := Free(filepath.Join(dir, "missing", "x")); err == nil {
		t.Fatal("Free of a missing path succeeded")
	}
}

func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	if err := SyncDir(dir); err != nil {
		t.Fatalf("SyncDir(%s): %v", dir, err)
	}
	missing := filepath.Join(dir, "missing")
	if err := SyncDir(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("SyncDir of a missing directory: %v, want ErrNotExist naming it", err)
	}
}

// recordFsync replaces fsync for the test: it records the path of each
// file synced, relative to root, and fails with fail once it reaches it.
func recordFsync(t *testing.T, root, fail string) *[]string {
	t.Helper()
	var synced []string
	orig := fsync
	fsync = func(f *os.File) error {
		rel, err := filepath.Rel(root, f.Name())
		if err != nil {
			t.Fatal(err)
		}
		synced = append(synced, rel)
		if rel == fail {
			return os.ErrPermission
		}
		return orig(f)
	}
	t.Cleanup(func() { fsync = orig })
	return &synced
}

func TestSyncTree(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{"a", "a/b", "c"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, file := range []string{"a/b/f", "a/g", "h"} {
		if err := os.WriteFile(filepath.Join(root, file), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(root, "h"), filepath.Join(root, "c/h")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		which Entries
		want  string
	}{
		{Files, "a/b/f a/g c/h h"},
		{Dirs, ". a a/b c"},
		{Files | Dirs, ". a a/b a/b/f a/g c c/h h"},
	} {
		synced := recordFsync(t, root, "")
		if err := SyncTree(root, tc.which); err != nil {
			t.Fatalf("SyncTree(%d): %v", tc.which, err)
		}
		if got := strings.Join(*synced, " "); got != tc.want {
			t.Errorf("SyncTree(%d) synced %s, want %s", tc.which, got, tc.want)
		}
	}
	// The first error stops the walk, and is the one returned.
	synced := recordFsync(t, root, "a/g")
	if err := SyncTree(root, Files); !errors.Is(err, os.ErrPermission) {
		t.Fatalf("SyncTree with a failing fsync: %v, want its error", err)
	}
	if got := strings.Join(*synced, " "); got != "a/b/f a/g" {
		t.Errorf("SyncTree went on after a failure: synced %s", got)
	}
	missing := filepath.Join(root, "missing")
	if err := SyncTree(missing, Files|Dirs); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SyncTree of a missing root: %v, want ErrNotExist", err)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	leftovers := func() {
		t.Helper()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "f" {
			t.Fatalf("the directory holds %v, want f alone", entries)
		}
	}
	for _, data := range []string{"first", "second, longer", ""} {
		synced := recordFsync(t, dir, "")
		if err := WriteFileAtomic(dir, "f", []byte(data)); err != nil {
			t.Fatalf("WriteFileAtomic(%q): %v", data, err)
		}
		if got := read(); got != data {
			t.Fatalf("f holds %q, want %q", got, data)
		}
		if len(*synced) != 1 || !strings.HasPrefix((*synced)[0], "f.tmp-") {
			t.Fatalf("fsynced %v, want the temporary file", *synced)
		}
		leftovers()
	}

	// A failed fsync fails the write with its error, naming the file, and
	// leaves the old file.
	orig := fsync
	fsync = func(*os.File) error { return os.ErrPermission }
	err := WriteFileAtomic(dir, "f", []byte("lost"))
	fsync = orig
	if !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "sync f") {
		t.Fatalf("WriteFileAtomic with a failing fsync: %v, want its error naming f", err)
	}
	if got := read(); got != "" {
		t.Fatalf("after a failed write f holds %q, want the old \"\"", got)
	}
	leftovers()

	missing := filepath.Join(dir, "missing")
	if err := WriteFileAtomic(missing, "f", nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteFileAtomic into a missing directory: %v, want ErrNotExist", err)
	}
}
