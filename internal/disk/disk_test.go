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
