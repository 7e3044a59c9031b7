package fsm

import (
	"errors"
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
)

// After a consumer's session expired and it was reclaimed, the same name
// pulling again is a new registration (a new epoch) whose pull sequences
// start from 0 again. An ack from the earlier life names the same
// sequences: before epochs it acknowledged the new life's entries, which
// were then never delivered to the group. Now it is refused as stale and
// changes nothing; the new life's entries stay unacked until it acks them.
func TestStaleAckDoesNotTouchTheNextLife(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 6)
	first := pullAt(t, f, 2, 1000, "s", "g", "c", 3)
	if first.Epoch != 1 || !slices.Equal(consumeSeqs(first), []int64{0, 1, 2}) {
		t.Fatalf("first life: %+v", first)
	}
	if r := reclaimAt(t, f, 3, 1000, "s", "g", "c"); r.Reclaimed != 3 {
		t.Fatalf("reclaimed %d, want 3", r.Reclaimed)
	}
	second := pullAt(t, f, 4, 1000, "s", "g", "c", 2)
	if second.Epoch != 2 || second.Entries[0].PullSeq != 0 || !slices.Equal(consumeSeqs(second), []int64{0, 1}) {
		t.Fatalf("second life: %+v", second)
	}
	before := stateBytes(f)
	r := applyAt(f, 5, &Ack{Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: first.Epoch, Ranges: []message.AckRange{{First: 0, Last: 2}}})
	if err, ok := r.(error); !ok || !errors.Is(err, ErrStaleConsumer) {
		t.Fatalf("ack from the first life: %v, want ErrStaleConsumer", r)
	}
	wantStateUnchanged(t, f, before)
	if got := ackAt(t, f, 6, 1000, "s", "g", "c", message.AckRange{First: 0, Last: 0}); got.AckPos != 1 {
		t.Fatalf("the second life's own ack: position %d, want 1", got.AckPos)
	}
	// A pull naming the earlier life has seen no reply of this one (the
	// reply that registered it was lost): this one's unacked entries come
	// again first, whatever its From, then new ones. Without that, they
	// stayed with a consumer that kept pulling, its session alive, for good.
	third := resultAs[*PullResult](t, applyAt(f, 7, &Pull{Start: StartEarliest, Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5, Resend: true, From: 3, Epoch: first.Epoch}))
	if third.Epoch != 2 || !slices.Equal(consumeSeqs(third), []int64{1, 2, 3, 4, 5}) || third.Entries[0].PullSeq != 1 {
		t.Fatalf("a pull naming the first life: %+v, want epoch 2: its unacked sequence 1 again, then 2..5", third)
	}
	// Epoch 0 (a restarted consumer taking over its name) gets the
	// unacked entries again.
	takeover := resultAs[*PullResult](t, applyAt(f, 8, &Pull{Start: StartEarliest, Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Resend: true, From: 0}))
	if !slices.Equal(consumeSeqs(takeover), []int64{1, 2, 3, 4, 5}) {
		t.Fatalf("takeover with epoch 0: %v", consumeSeqs(takeover))
	}
}

// A Reclaim proposed for one registration and committed after the
// consumer registered afresh (a retried proposal) leaves the new one be.
func TestReclaimOfAnEndedEpochDoesNothing(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 4)
	pullAt(t, f, 2, 1000, "s", "g", "c", 2)
	if r := resultAs[*ReclaimResult](t, applyAt(f, 3, &Reclaim{Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1})); r.Reclaimed != 2 {
		t.Fatalf("reclaim of epoch 1: %+v", r)
	}
	pullAt(t, f, 4, 1000, "s", "g", "c", 2)
	before := stateBytes(f)
	if r := resultAs[*ReclaimResult](t, applyAt(f, 5, &Reclaim{Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1})); r.Reclaimed != 0 {
		t.Fatalf("a second reclaim of epoch 1 took %d entries of epoch 2", r.Reclaimed)
	}
	wantStateUnchanged(t, f, before)
}

// Forget removes a group and its consumers; the group pulling again
// starts at the oldest retained message, with new epochs.
func TestForgetGroup(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 3)
	pullAt(t, f, 2, 1000, "s", "g", "a", 2)
	pullAt(t, f, 3, 1000, "s", "g", "b", 1)
	pullAt(t, f, 4, 1000, "s", "other", "a", 1)
	r := resultAs[*ForgetResult](t, applyAt(f, 5, &Forget{Now: 1000, Subject: "s", ConsumerGroup: "g"}))
	if !r.Known || r.Consumers != 2 || r.Unacked != 3 {
		t.Fatalf("forget: %+v", r)
	}
	if f.Epoch(ConsumerID{Subject: "s", ConsumerGroup: "g", Consumer: "a"}) != 0 || f.Epoch(ConsumerID{Subject: "s", ConsumerGroup: "other", Consumer: "a"}) == 0 || f.st.groupsOf["s"] != 1 {
		t.Fatal("forget removed the wrong consumers or groups")
	}
	before := stateBytes(f)
	if r := resultAs[*ForgetResult](t, applyAt(f, 6, &Forget{Now: 1000, Subject: "s", ConsumerGroup: "g"})); r.Known {
		t.Fatalf("forgetting it again: %+v", r)
	}
	wantStateUnchanged(t, f, before)
	again := pullAt(t, f, 7, 1000, "s", "g", "a", 5)
	if again.Epoch != 4 || !slices.Equal(consumeSeqs(again), []int64{0, 1, 2}) {
		t.Fatalf("the group pulling again: %+v", again)
	}
	// Counts survive a checkpoint and a restart (they are derived on open).
	takeSnapshot(t, f)
	cfg := f.cfg
	f.Close()
	g := unitOpen(t, cfg)
	if g.st.groupsOf["s"] != 2 || g.st.groups[groupKey{"s", "g"}].consumers != 1 || g.st.nextEpoch != 5 {
		t.Fatalf("after a restart: %v groups of s, %d consumers of g, next epoch %d", g.st.groupsOf["s"], g.st.groups[groupKey{"s", "g"}].consumers, g.st.nextEpoch)
	}
}
