package disk

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSyncfsReportsWriteBackFrom58(t *testing.T) {
	for release, want := range map[string]bool{
		"5.8.0": true, "5.8": true, "5.15.0-91-generic": true, "6.1.0-18-amd64": true, "10.0.1": true,
		"5.7.19": false, "5.4.0-150-generic": false, "4.19.0-26-amd64": false, "3.10.0-1160.el7.x86_64": false,
		"": false, "garbage": false, "5": false, "5.x": false,
	} {
		if got := SyncfsReportsWriteBack(release); got != want {
			t.Errorf("SyncfsReportsWriteBack(%q) = %v, want %v", release, got, want)
		}
	}
}

func TestKernelRelease(t *testing.T) {
	release, err := KernelRelease()
	if err != nil || release == "" {
		t.Fatalf("KernelRelease() = %q, %v", release, err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if want := string(b[:len(b)-1]); release != want {
		t.Fatalf("KernelRelease() = %q, /proc/sys/kernel/osrelease says %q", release, want)
	}
}

// Syncfs goes through the descriptor it is given, whose errors it reports:
// one closed since is refused.
func TestSyncfsThroughTheDescriptor(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Syncfs(d); err != nil {
		t.Fatalf("Syncfs(%s): %v", dir, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Syncfs(d); !errors.Is(err, unix.EBADF) {
		t.Fatalf("Syncfs through a closed descriptor: %v, want EBADF", err)
	}
}
