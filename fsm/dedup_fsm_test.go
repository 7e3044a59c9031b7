package fsm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// Retention cuts the message log in the middle of a dedup bucket: ids of
// removed messages are appended again, ids after the cut are duplicates,
// and a replica that restarted (rebuilding its window from the log) answers
// and writes exactly as one that lived through it.
func TestDedupAcrossRetentionCuttingABucket(t *testing.T) {
	r := logs.Retention{MaxBytes: 3 << 20}
	var entries []*raft.Log
	var all []*message.Message
	for i := range 40 { // one second apart: all in one bucket of 60 s
		m := bigMsg(fmt.Sprint("m", i), "s")
		entries = append(entries, unitEntry(uint64(i+1), &Append{Now: 1000 + int64(i)*1000, Messages: []*message.Message{m}}))
		all = append(all, bigMsg(m.ID, "s"))
	}
	resend := unitEntry(41, &Append{Now: 41_000, Messages: append(all, unitMsg("new", "s", 1))})

	ref := retentionFSM(t, r)
	want := applyAll(ref, entries)
	start := ref.store.messages.Log().Start()
	if b := ref.dedup.Buckets(); start == 0 || len(b) != 1 || b[0] >= start {
		t.Fatal("the test wants retention to cut the one bucket of the window")
	}
	res := ref.Apply(resend).(*AppendResult)
	want = append(want, describe(res))
	entries = append(entries, resend)
	again := 0
	for i, m := range res.Messages[:len(all)] {
		switch {
		case m.Status == Appended && i == again: // removed by retention: appended again
			again++
		case m.Status == Duplicate && m.Offset >= start: // after the cut
		default:
			t.Fatalf("message %d of the resend: %+v (the log starts at %d)", i, m, start)
		}
	}
	if again == 0 || again == len(all) {
		t.Fatalf("%d of %d ids were appended again: the cut is not inside the window", again, len(all))
	}

	cfg := unitConfig(t.TempDir())
	cfg.Retention = r
	f := unitOpen(t, cfg)
	applyAll(f, entries[:5])
	takeSnapshot(t, f)
	applyAll(f, entries[5:35])
	f.Close()
	g := unitOpen(t, cfg)
	applied := g.Applied()
	got := applyAll(g, entries[5:])
	if applied >= 40 || got[len(got)-1] != want[len(want)-1] {
		t.Fatalf("after a restart at %d the resend answered\n%s\nthe live replica\n%s", applied, got[len(got)-1], want[len(want)-1])
	}
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
}

// collidingIDs returns two ids whose hashes differ but whose slots share a
// fingerprint and a start slot in a bucket's first table (256 slots); the
// dedup package's TestCollidingIDsShareASlot holds them to it.
func collidingIDs(*testing.T) (string, string) { return "fp10536", "fp119258" }

// Two ids whose fingerprints collide are told apart by reading the message:
// both are appended, and each is then a duplicate of its own message, live
// and after a restart.
func TestDedupFingerprintCollisionReadsTheMessage(t *testing.T) {
	a, b := collidingIDs(t)
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	first := appendAt(t, f, 1, 1000, unitMsg(a, "s", 1))
	if got := f.dedup.Lookup(b); !slices.Equal(got, []int64{first.Messages[0].Offset}) {
		t.Fatalf("%s and %s do not collide: %v", a, b, got)
	}
	second := appendAt(t, f, 2, 1001, unitMsg(b, "s", 1))
	if second.Messages[0].Status != Appended {
		t.Fatalf("the colliding id was not appended: %+v", second.Messages[0])
	}
	takeSnapshot(t, f)
	check := func(f *FSM, index uint64) {
		t.Helper()
		res := appendAt(t, f, index, 2000, unitMsg(b, "s", 1), unitMsg(a, "s", 1))
		if res.Messages[0].Status != Duplicate || res.Messages[0].Offset != second.Messages[0].Offset ||
			res.Messages[1].Status != Duplicate || res.Messages[1].Offset != first.Messages[0].Offset {
			t.Fatalf("resends answered %+v", res.Messages)
		}
	}
	check(f, 3)
	f.Close()
	check(unitOpen(t, cfg), 3)
}
