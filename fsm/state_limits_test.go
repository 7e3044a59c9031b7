package fsm

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
)

// lowerLimit sets *v to n for the test.
func lowerLimit(t *testing.T, v *int, n int) {
	old := *v
	*v = n
	t.Cleanup(func() { *v = old })
}

// A pull of a subject without messages registers its group and consumer
// (a group starting at the latest message must get the subject's first
// one), within the limits on the state; a version 2 pull, as before,
// registers nothing, so that old entries replay as they were applied.
func TestPullOfUnknownSubjectRegisters(t *testing.T) {
	f := unitFSM(t)
	r := pullAt(t, f, 1, 0, "later", "g", "c", 10)
	if r.Epoch == 0 || len(r.Entries) != 0 {
		t.Fatalf("pull of a subject without messages: %+v", r)
	}
	appendN(t, f, 2, "later", "m", 3)
	if got := consumeSeqs(pullAt(t, f, 3, 0, "later", "g", "c", 10)); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("a group created before its subject's first message got %v, want all three", got)
	}
	// A group of a subject without messages goes with its last consumer:
	// made-up names leave nothing behind once their sessions expire.
	pullAt(t, f, 4, 0, "nothing-yet", "g", "c", 10)
	if len(f.ConsumerGroups()) != 2 {
		t.Fatalf("groups %+v, want later/g and nothing-yet/g", f.ConsumerGroups())
	}
	applyAt(f, 5, &Reclaim{Now: 1, Subject: "nothing-yet", ConsumerGroup: "g", Consumer: "c"})
	if _, ok := f.ConsumerGroup("nothing-yet", "g"); ok || len(f.Consumers()) != 1 {
		t.Fatalf("after its consumer went, the group of a subject without messages is still known: %+v", f.ConsumerGroups())
	}
	// A group whose subject has messages stays when its consumers go.
	applyAt(f, 6, &Reclaim{Now: 1, Subject: "later", ConsumerGroup: "g", Consumer: "c"})
	if _, ok := f.ConsumerGroup("later", "g"); !ok {
		t.Fatal("a group of a subject with messages was forgotten with its consumer")
	}
	before := stateBytes(f)
	legacy := (&Pull{Now: 1, Subject: "nothing", ConsumerGroup: "g", Consumer: "c", Max: 10, version: commandVersionEpoch}).Encode()
	if got := f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: legacy}); !reflect.DeepEqual(got, &PullResult{}) {
		t.Fatalf("version 2 pull of an unknown subject: %#v", got)
	}
	wantStateUnchanged(t, f, before)
}

// Each limit on the state: a command just at it is applied, the next is
// refused alike on every replica and changes nothing, and the state stays
// within the limit after a restart.
func TestStateLimits(t *testing.T) {
	lowerLimit(t, &maxSubjects, 3)
	lowerLimit(t, &maxGroupsPerSubject, 2)
	lowerLimit(t, &maxGroups, 3)
	lowerLimit(t, &maxConsumersPerGroup, 2)
	lowerLimit(t, &maxConsumers, 5)
	f := unitFSM(t)
	idx := uint64(0)
	next := func() uint64 { idx++; return idx }
	wantLimit := func(what string, r any) {
		t.Helper()
		err, ok := r.(error)
		if !ok || !errors.Is(err, ErrLimit) {
			t.Fatalf("%s: %v, want ErrLimit", what, r)
		}
	}

	// Subjects: three take messages (one only a delayed one), the fourth is refused.
	appendAt(t, f, next(), 1000, unitMsg("a", "s1", 1), unitMsg("b", "s2", 1))
	d := unitMsg("c", "s3", 1)
	d.DeliverAt = 10_000
	if r := appendAt(t, f, next(), 1000, d); r.Messages[0].Status != Scheduled {
		t.Fatalf("delayed message to the third subject: %+v", r.Messages[0])
	}
	r := appendAt(t, f, next(), 1000, unitMsg("d", "s4", 1), unitMsg("e", "s1", 1))
	if r.Messages[0].Status != Rejected || !errors.Is(r.Messages[0].Err, ErrLimit) || r.Messages[1].Status != Appended {
		t.Fatalf("the fourth subject: %+v", r.Messages)
	}
	if f.HasSubject("s4") {
		t.Fatal("the refused subject has a consume log")
	}

	// Groups of a subject, and groups in all.
	pullAt(t, f, next(), 1000, "s1", "g1", "c1", 1)
	pullAt(t, f, next(), 1000, "s1", "g2", "c1", 1)
	before := stateBytes(f)
	wantLimit("a third group of s1", applyAt(f, next(), &Pull{Start: StartEarliest, Now: 1000, Subject: "s1", ConsumerGroup: "g3", Consumer: "c1", Max: 1}))
	wantStateUnchanged(t, f, before)
	pullAt(t, f, next(), 1000, "s2", "g1", "c1", 1)
	before = stateBytes(f)
	wantLimit("a fourth group", applyAt(f, next(), &Pull{Start: StartEarliest, Now: 1000, Subject: "s2", ConsumerGroup: "g2", Consumer: "c1", Max: 1}))
	wantStateUnchanged(t, f, before)

	// Consumers of a group, and consumers in all.
	pullAt(t, f, next(), 1000, "s1", "g1", "c2", 1)
	before = stateBytes(f)
	wantLimit("a third consumer of g1", applyAt(f, next(), &Pull{Start: StartEarliest, Now: 1000, Subject: "s1", ConsumerGroup: "g1", Consumer: "c3", Max: 1}))
	wantStateUnchanged(t, f, before)
	pullAt(t, f, next(), 1000, "s1", "g2", "c2", 1)
	wantLimit("a sixth consumer", applyAt(f, next(), &Pull{Start: StartEarliest, Now: 1000, Subject: "s2", ConsumerGroup: "g1", Consumer: "c2", Max: 1}))

	// A consumer that goes away frees its place.
	reclaimAt(t, f, next(), 1000, "s1", "g2", "c2")
	pullAt(t, f, next(), 1000, "s2", "g1", "c2", 1)
	// A forgotten group frees its place and its consumers'.
	resultAs[*ForgetResult](t, applyAt(f, next(), &Forget{Now: 1000, Subject: "s1", ConsumerGroup: "g2"}))
	pullAt(t, f, next(), 1000, "s1", "g3", "c1", 1)

	// The counts are the same after a restart.
	want := stateBytes(f)
	takeSnapshot(t, f)
	cfg := f.cfg
	f.Close()
	g := unitOpen(t, cfg)
	if string(stateBytes(g)) != string(want) || len(g.subjects) != 3 || g.st.groupsOf["s1"] != 2 {
		t.Fatalf("after a restart: %d subjects, %d groups of s1", len(g.subjects), g.st.groupsOf["s1"])
	}
	wantLimit("a third consumer of g1 after the restart", applyAt(g, idx+1, &Pull{Start: StartEarliest, Now: 1000, Subject: "s1", ConsumerGroup: "g1", Consumer: "c3", Max: 1}))
	if r := appendAt(t, g, idx+2, 1000, &message.Message{ID: "z", Subject: "s9", CreatedAt: 1}); r.Messages[0].Status != Rejected {
		t.Fatalf("a fourth subject after the restart: %+v", r.Messages[0])
	}
}
