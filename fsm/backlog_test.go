package fsm

import (
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

func TestBacklogCountsWhatGroupsStillOwe(t *testing.T) {
	f := unitFSM(t)
	appendAt(t, f, 1, 1000, unitMsg("a", "s", 8), unitMsg("b", "s", 8), unitMsg("c", "s", 8), unitMsg("d", "s", 8))
	if got := f.Backlog(); got != 0 {
		t.Fatalf("backlog %d before any group pulled, want 0 (no group known)", got)
	}
	pullAt(t, f, 2, 1000, "s", "billing", "c1", 3) // 3 handed out, 1 not yet
	pullAt(t, f, 3, 1000, "s", "audit", "c1", 4)   // 4 handed out
	if got := f.Backlog(); got != 8 {
		t.Fatalf("backlog %d, want 8 (4 per group)", got)
	}
	ackAt(t, f, 4, 1000, "s", "billing", "c1", message.AckRange{First: 0, Last: 1})
	ackAt(t, f, 5, 1000, "s", "audit", "c1", message.AckRange{First: 0, Last: 3})
	if got := f.Backlog(); got != 2 {
		t.Fatalf("backlog %d, want 2 (billing: one unacked, one not pulled)", got)
	}
	reclaimAt(t, f, 6, 1000, "s", "billing", "c1") // the unacked one goes back to the group
	if got := f.Backlog(); got != 2 {
		t.Fatalf("backlog %d after reclaim, want 2", got)
	}
	pullAt(t, f, 7, 1000, "s", "billing", "c2", 10)
	ackAt(t, f, 8, 1000, "s", "billing", "c2", message.AckRange{First: 0, Last: 1})
	if got := f.Backlog(); got != 0 {
		t.Fatalf("backlog %d when every group acked everything, want 0", got)
	}
}
