package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func TestSyncFaultFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sync-fault")
	fault := fileSyncFault(path, hclog.NewNullLogger())
	if err := fault(); err != nil {
		t.Fatalf("no file: %v", err)
	}
	for content, want := range map[string]error{"": nil, "eio": nil, "1": nil, "EIO\n": syscall.EIO, " EIO ": syscall.EIO} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := fault(); !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("file holding %q: %v, want %v", content, err, want)
		}
	}
	os.Remove(path)
	if err := fault(); err != nil {
		t.Fatalf("file removed: %v", err)
	}
}
