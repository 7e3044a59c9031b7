package server

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestStatusReportsLastSnapshot: a node that holds no snapshot reports
// none; after one is taken, a broker node and a metaserver node report
// its index, term and time in Status and on /status, and the metaserver
// node its data disk's free bytes as a broker node does.
func TestStatusReportsLastSnapshot(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.HTTPAddr = "127.0.0.1:0" })
	waitFor(t, 10*time.Second, "both lead", func() bool {
		return n.Status().State == "Leader" && m.Status().State == "Leader" && n.Status().AppliedIndex > 0 && m.Status().AppliedIndex > 0
	})
	for _, st := range []Status{n.Status(), m.Status()} {
		if st.LastSnapshotIndex != 0 || st.LastSnapshotTerm != 0 || !st.LastSnapshotAt.IsZero() {
			t.Errorf("%s before any snapshot: index %d, term %d, at %v; want none", st.ID, st.LastSnapshotIndex, st.LastSnapshotTerm, st.LastSnapshotAt)
		}
	}
	before := time.Now().Add(-time.Second)
	for _, r := range []*raft.Raft{n.Raft(), m.Raft()} {
		if err := r.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now().Add(time.Second)
	for _, st := range []Status{n.Status(), m.Status()} {
		// The snapshot's term is its last entry's: the node's now, or an
		// earlier one if a loaded machine made it stand for election since.
		if st.LastSnapshotIndex == 0 || st.LastSnapshotIndex > st.LastIndex || st.LastSnapshotTerm == 0 || st.LastSnapshotTerm > st.Term {
			t.Errorf("%s: last snapshot at index %d term %d; last index %d, term %d", st.ID, st.LastSnapshotIndex, st.LastSnapshotTerm, st.LastIndex, st.Term)
		}
		if st.LastSnapshotAt.Before(before) || st.LastSnapshotAt.After(after) {
			t.Errorf("%s: last snapshot taken at %v, want between %v and %v", st.ID, st.LastSnapshotAt, before, after)
		}
		if st.DiskFree <= 0 {
			t.Errorf("%s: disk free %d", st.ID, st.DiskFree)
		}
	}
	resp, err := http.Get("http://" + m.HTTPAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"last_snapshot_index", "last_snapshot_term", "last_snapshot_at", "disk_free"} {
		if _, ok := page[k]; !ok {
			t.Errorf("/status of the metaserver has no %s: %v", k, page)
		}
	}
}
