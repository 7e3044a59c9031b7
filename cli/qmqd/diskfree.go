package main

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/disk"
)

// fileDiskFree returns a disk probe that reports at most the byte count
// written in path: fault injection, with which a chaos run makes a node's
// disk look full where it cannot mount a small file system. The file is
// read again every 100 ms; a missing or empty file leaves the real free
// space.
func fileDiskFree(path string, log hclog.Logger) disk.Probe {
	var limit atomic.Int64
	limit.Store(-1)
	read := func() {
		b, err := os.ReadFile(path)
		s := strings.TrimSpace(string(b))
		if err != nil || s == "" {
			limit.Store(-1)
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			log.Warn("ignoring the disk free file", "path", path, "content", s)
			return
		}
		if old := limit.Swap(n); old != n {
			log.Warn("free disk space limited (fault injection)", "bytes", n)
		}
	}
	read()
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			read()
		}
	}()
	return func(dir string) (int64, error) {
		free, err := disk.Free(dir)
		if l := limit.Load(); l >= 0 && (err != nil || l < free) {
			return l, nil
		}
		return free, err
	}
}
