package raftlog

import (
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkWALReadSealedSegment reads one entry of 4 KiB from each of a
// run of sealed segments in turn: "open" from 16 segments, whose files
// stay open, "reopen" from 64, more than the store keeps open, so that
// every read opens its segment's file again (open(2), a pread of the
// header, the read, and later a close). The files are in the page cache.
//
//	go test ./server/raftlog -run '^$' -bench WALReadSealedSegment -benchtime 20000x -count 5
func BenchmarkWALReadSealedSegment(b *testing.B) {
	dir := b.TempDir()
	s, err := openWAL(dir, 64<<10, hclog.NewNullLogger())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const size, perSegment = 4 << 10, 16 // a batch fills a 64 KiB segment and seals it
	const batches = 2*sealedSegmentFiles + 1
	last := uint64(batches * perSegment)
	for i := uint64(1); i <= last; i += perSegment {
		if err := s.logs.StoreLogs(bigEntries(i, perSegment, size)); err != nil {
			b.Fatal(err)
		}
	}
	if n := walSegments(b, dir); n < batches {
		b.Fatalf("%d segments for %d batches, want a segment a batch", n, batches)
	}
	// firstOf returns the first entry of each of the first n segments.
	firstOf := func(n int) []uint64 {
		var idx []uint64
		for i := uint64(1); i <= last && len(idx) < n; i += perSegment {
			idx = append(idx, i)
		}
		return idx
	}
	for _, bc := range []struct {
		name     string
		segments int
	}{{"open", sealedSegmentFiles / 2}, {"reopen", 2 * sealedSegmentFiles}} {
		b.Run(bc.name, func(b *testing.B) {
			idx := firstOf(bc.segments)
			var l raft.Log
			for i := range b.N {
				if err := s.logs.GetLog(idx[i%len(idx)], &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
