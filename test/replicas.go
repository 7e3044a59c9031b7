package test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
)

// fsmFiles reads a broker node's state-machine logs (everything under
// DATA/fsm/data but the checkpoint, whose timing differs per node), by
// path relative to that directory.
func fsmFiles(n *Node) (map[string][]byte, error) {
	root := filepath.Join(n.DataDir, "fsm", "data")
	out := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		// Left out: a key index's sidecar being written (X.idx.tmp), and
		// snapshot staging (.tmp-).
		if d.IsDir() || rel == "checkpoint" || strings.Contains(rel, ".tmp-") || strings.HasSuffix(rel, ".tmp") {
			return nil
		}
		b, err := os.ReadFile(path)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	return out, err
}

// SameReplicas waits until the group's nodes have applied the same index
// and stay there while their logs are read, then checks that every node
// holds byte-identical logs and counts the same backlog (what its consumer
// groups still owe, from their cursors, redeliveries and unacked entries:
// state the logs do not show, such as a cursor retention moved past what
// it removed). The group must be idle (no client traffic).
func (c *Cluster) SameReplicas(timeout time.Duration) {
	c.t.Helper()
	c.WaitFor(timeout, c.Group+": every replica's logs are byte-identical", func() error {
		before, err := c.Converged()
		if err != nil {
			return err
		}
		files := map[string]map[string][]byte{}
		for _, n := range c.Nodes() {
			if files[n.ID], err = fsmFiles(n); err != nil {
				return err
			}
		}
		after, err := c.Converged()
		if err != nil {
			return err
		}
		for id, st := range after {
			if before[id].AppliedIndex != st.AppliedIndex {
				return fmt.Errorf("%s applied more while its logs were read", id)
			}
		}
		if err := sameFiles(files); err != nil {
			return err
		}
		return sameBacklog(after)
	})
}

// sameBacklog reports nodes that count different backlogs, or nil.
func sameBacklog(sts map[string]*admin.Status) error {
	var first string
	for id := range sts {
		if first == "" || id < first {
			first = id
		}
	}
	for id, st := range sts {
		if st.Backlog != sts[first].Backlog {
			return fmt.Errorf("%s counts a backlog of %d, %s of %d", id, st.Backlog, first, sts[first].Backlog)
		}
	}
	return nil
}

// sameFiles reports the first difference between the nodes' files, or nil.
// A schedule hour (schedule/HOUR/…) may be missing on some nodes: each
// removes an hour whose every message was delivered at its own
// checkpoints. Such an hour must then be wholly delivered on the nodes
// that still hold it; hours every node holds are compared like any file.
// The journal's oldest segments may be missing on some nodes too: each
// drops, at its own checkpoints, the segments older than any dedup window
// (sameJournals).
func sameFiles(files map[string]map[string][]byte) error {
	var first string
	for id := range files {
		if first == "" || id < first {
			first = id
		}
	}
	hourOn := map[string]map[string]bool{} // hour → nodes holding it
	for id, theirs := range files {
		for rel := range theirs {
			if hour, ok := scheduleHour(rel); ok {
				if hourOn[hour] == nil {
					hourOn[hour] = map[string]bool{}
				}
				hourOn[hour][id] = true
			}
		}
	}
	if err := sameJournals(files); err != nil {
		return err
	}
	everywhere := func(rel string) bool {
		if strings.HasPrefix(rel, journalPrefix) {
			for _, theirs := range files {
				if _, ok := theirs[rel]; !ok {
					return false
				}
			}
			return true
		}
		hour, ok := scheduleHour(rel)
		return !ok || len(hourOn[hour]) == len(files)
	}
	for hour, on := range hourOn {
		if len(on) == len(files) {
			continue
		}
		for id := range on {
			if err := delivered(files[id], hour); err != nil {
				return fmt.Errorf("schedule hour %s is on %d of %d nodes, and on %s %w", hour, len(on), len(files), id, err)
			}
		}
	}
	for id := range files {
		for _, set := range []struct{ a, b string }{{first, id}, {id, first}} {
			for rel, b := range files[set.a] {
				if !everywhere(rel) {
					continue
				}
				if other, ok := files[set.b][rel]; !ok {
					return fmt.Errorf("%s has %s, %s has not", set.a, rel, set.b)
				} else if !bytes.Equal(b, other) {
					return fmt.Errorf("%s differs between %s and %s (%d and %d bytes)", rel, set.a, set.b, len(b), len(other))
				}
			}
		}
	}
	return nil
}

// journalPrefix is where the journal's segments lie.
const journalPrefix = "journal/"

// sameJournals checks that every node holds a suffix of the journal's
// segments: those all nodes hold, and perhaps older ones that others
// dropped already, never a gap or a newer one only some hold. The
// segments every node holds are compared like any file.
func sameJournals(files map[string]map[string][]byte) error {
	union := map[string]bool{}
	for _, theirs := range files {
		for rel := range theirs {
			if strings.HasPrefix(rel, journalPrefix) {
				union[rel] = true
			}
		}
	}
	all := slices.Sorted(maps.Keys(union)) // segments are named by their zero-padded base
	for id, theirs := range files {
		held := false
		for _, rel := range all {
			_, ok := theirs[rel]
			if held && !ok {
				return fmt.Errorf("%s's journal lacks %s, but holds older segments", id, rel)
			}
			held = held || ok
		}
	}
	return nil
}

// scheduleHour returns the hour directory a schedule file lies in.
func scheduleHour(rel string) (string, bool) {
	parts := strings.Split(rel, "/")
	if len(parts) < 3 || parts[0] != "schedule" {
		return "", false
	}
	return parts[1], true
}

// delivered reports whether a node's schedule hour has every record
// dispatched: as many dispatch records as records.
func delivered(files map[string][]byte, hour string) error {
	var records, dispatched int
	for rel, b := range files {
		if h, ok := scheduleHour(rel); !ok || h != hour {
			continue
		}
		n, err := countRecords(b)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if strings.Contains(rel, "/dispatched/") {
			dispatched += n
		} else {
			records += n
		}
	}
	if dispatched != records {
		return fmt.Errorf("it holds %d delayed messages of which %d were delivered", records, dispatched)
	}
	return nil
}

// countRecords counts the records of a segment file (a 16-byte header,
// then records of u32 length, u32 checksum and payload).
func countRecords(b []byte) (int, error) {
	const header, recordHeader = 16, 8
	if len(b) < header {
		return 0, fmt.Errorf("segment of %d bytes", len(b))
	}
	n := 0
	for off := header; off < len(b); n++ {
		if len(b)-off < recordHeader {
			return n, fmt.Errorf("record header cut at %d", off)
		}
		size := int(binary.LittleEndian.Uint32(b[off:]))
		if size == 0 || len(b)-off-recordHeader < size {
			return n, fmt.Errorf("record of %d bytes at %d", size, off)
		}
		off += recordHeader + size
	}
	return n, nil
}
