package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProcReaders(t *testing.T) {
	m, err := readMemory(os.Getpid())
	if err != nil || m.rss <= 0 || m.hwm < m.rss {
		t.Errorf("memory of this process: %+v, %v", m, err)
	}
	if _, err := writeBytes(os.Getpid()); err != nil {
		t.Errorf("write_bytes of this process: %v", err)
	}
	if _, err := readMemory(-1); err == nil {
		t.Error("memory of no process")
	}
	if la := loadAverage(); len(strings.Fields(la)) != 3 {
		t.Errorf("load average %q", la)
	}
}

// A file linked twice (as snapshots link segments) counts once, as du
// counts it.
func TestDiskUsageCountsLinksOnce(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dir, "a"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	one, err := diskUsage(dir)
	if err != nil || one < int64(len(data)) {
		t.Fatalf("one file: %d, %v", one, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "snap"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "snap", "a")); err != nil {
		t.Fatal(err)
	}
	linked, err := diskUsage(dir)
	if err != nil || linked > one+8192 { // the new directory's own block or two
		t.Errorf("with a hard link: %d, was %d (%v)", linked, one, err)
	}
}
