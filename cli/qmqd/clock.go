package main

import (
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// fileClock returns the machine's clock plus an offset read from path:
// fault injection, with which a chaos run makes a node's clock jump by
// writing a duration there ("30s", "-5s"). The file is read again every
// 100 ms; a missing or empty file is no offset.
func fileClock(path string, log hclog.Logger) func() time.Time {
	var offset atomic.Int64
	read := func() {
		b, err := os.ReadFile(path)
		s := strings.TrimSpace(string(b))
		if err != nil || s == "" {
			offset.Store(0)
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			log.Warn("ignoring the clock offset file", "path", path, "error", err)
			return
		}
		if old := time.Duration(offset.Swap(int64(d))); old != d {
			log.Warn("clock offset changed (fault injection)", "offset", d)
		}
	}
	read()
	go func() {
		for range time.Tick(100 * time.Millisecond) {
			read()
		}
	}()
	return func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
}
