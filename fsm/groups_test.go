package fsm

import (
	"fmt"
	"slices"
	"testing"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// A tag filter hands out messages with any of its tags, or with TagsAll
// all of them, and moves the group's cursor over the rest.
func TestTagFilter(t *testing.T) {
	r := newGroupRig(t)
	r.send("s", []string{"a"}, []string{"b"}, []string{"a", "b"}, nil, []string{"c"})
	or := r.pull(Pull{Subject: "s", ConsumerGroup: "or", Consumer: "c", Max: 10, Start: StartEarliest, Tags: []string{"a", "b"}})
	if got := consumeSeqs(or); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("any of a, b: %v", got)
	}
	and := r.pull(Pull{Subject: "s", ConsumerGroup: "and", Consumer: "c", Max: 10, Start: StartEarliest, Tags: []string{"a", "b"}, TagsAll: true})
	if got := consumeSeqs(and); !slices.Equal(got, []int64{2}) {
		t.Fatalf("all of a, b: %v", got)
	}
	if info := r.group("and"); info.Cursor != 5 || info.Lag() != 1 {
		t.Fatalf("the cursor did not move over the rest: %+v", info)
	}
}

// collidingTags returns two distinct tags with the same tag-mask bit.
func collidingTags(t *testing.T) (string, string) {
	seen := map[uint64]string{}
	for i := range 1000 {
		tag := fmt.Sprint("t", i)
		m := message.TagMask([]string{tag})
		if other, ok := seen[m]; ok {
			return other, tag
		}
		seen[m] = tag
	}
	t.Fatal("no two tags collide")
	return "", ""
}

// Tags that share a mask bit are told apart by the message's own tags.
func TestTagFilterMaskCollision(t *testing.T) {
	x, y := collidingTags(t)
	r := newGroupRig(t)
	r.send("s", []string{x}, []string{y})
	for _, all := range []bool{false, true} {
		p := r.pull(Pull{Subject: "s", ConsumerGroup: fmt.Sprint("g", all), Consumer: "c", Max: 10, Start: StartEarliest, Tags: []string{y}, TagsAll: all})
		if got := consumeSeqs(p); !slices.Equal(got, []int64{1}) {
			t.Fatalf("tag %s (all %v), colliding with %s: pulled %v", y, all, x, got)
		}
	}
}

// A filtered pull looks at most maxTagScan entries and then says More; the
// next pull goes on from there.
func TestTagFilterScanBound(t *testing.T) {
	old := maxTagScan
	maxTagScan = 4
	t.Cleanup(func() { maxTagScan = old })
	r := newGroupRig(t)
	r.send("s", nil, nil, nil, nil, nil, []string{"a"}, nil)
	pull := func() *PullResult {
		return r.pull(Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Start: StartEarliest, Tags: []string{"a"}})
	}
	if p := pull(); len(p.Entries) != 0 || !p.More || r.group("g").Cursor != 4 {
		t.Fatalf("first pull: %+v, cursor %d", p, r.group("g").Cursor)
	}
	if p := pull(); !slices.Equal(consumeSeqs(p), []int64{5}) || p.More || r.group("g").Cursor != 7 {
		t.Fatalf("second pull: %+v, cursor %d", p, r.group("g").Cursor)
	}
}

// A new group starts at the latest message by default, or at the
// earliest, or at the first appended at or after a time; a version 2
// pull starts it at the earliest.
func TestStartPositions(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 2)
	r.now += 60_000
	t1 := r.now
	r.sendN("s", 2)
	for _, c := range []struct {
		start StartPosition
		at    int64
		want  []int64
	}{
		{StartLatest, 0, []int64{}},
		{StartEarliest, 0, []int64{0, 1, 2, 3}},
		{StartAtTime, t1, []int64{2, 3}},
		{StartAtTime, t1 - 1, []int64{2, 3}},
		{StartAtTime, t1 + 1, []int64{}},
		{StartAtTime, 0, []int64{0, 1, 2, 3}},
	} {
		g := fmt.Sprintf("%s%d", c.start, c.at)
		p := r.pull(Pull{Subject: "s", ConsumerGroup: g, Consumer: "c", Max: 10, Start: c.start, StartAt: c.at})
		if got := consumeSeqs(p); !slices.Equal(got, c.want) {
			t.Fatalf("start %s at %d: %v, want %v", c.start, c.at, got, c.want)
		}
	}
	// The start applies only when the pull creates the group.
	if p := r.pull(Pull{Subject: "s", ConsumerGroup: "latest0", Consumer: "c", Max: 10, Start: StartEarliest}); len(p.Entries) != 0 {
		t.Fatalf("an existing group moved: %v", consumeSeqs(p))
	}
	seqs := r.sendN("s", 1)
	if p := r.pull(Pull{Subject: "s", ConsumerGroup: "latest0", Consumer: "c", Max: 10}); !slices.Equal(consumeSeqs(p), seqs) {
		t.Fatalf("latest after a send: %v", consumeSeqs(p))
	}
	// A pull of a subject without messages registers a group starting at
	// the latest: it gets the first message.
	r.pull(Pull{Subject: "new", ConsumerGroup: "g", Consumer: "c", Max: 10})
	appendAt(t, r.f, r.next(), r.now, unitMsg("n0", "new", 1))
	if p := r.pull(Pull{Subject: "new", ConsumerGroup: "g", Consumer: "c", Max: 10}); !slices.Equal(consumeSeqs(p), []int64{0}) {
		t.Fatalf("new subject: %v", consumeSeqs(p))
	}
	wantInvalid(t, r.apply(&Pull{Now: r.now, Subject: "s", ConsumerGroup: "bad", Consumer: "c", Max: 1, Start: StartAtTime + 1}))
	wantInvalid(t, r.apply(&Pull{Now: r.now, Subject: "s", ConsumerGroup: "bad", Consumer: "c", Max: 1, Start: StartAtTime, StartAt: -1}))
}

// A reset moves the cursor, drops what the group had to hand out again,
// and the retries of its old life when they fire.
func TestResetGroupDropsOldRetries(t *testing.T) {
	r := newGroupRig(t)
	r.sendN("s", 3)
	r.pullN("g", "c", 3)
	r.nack("g", "c", r.now+1000, one(0))
	r.nack("g", "c", r.now, one(1)) // due at once
	if info := r.group("g"); info.Retrying != 1 || info.Redeliver != 1 {
		t.Fatalf("before the reset: %+v", info)
	}
	res := resultAs[*ConsumerGroupResult](t, r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: "g", To: StartLatest}))
	if res.Created {
		t.Fatalf("reset created the group")
	}
	if info := r.group("g"); info.Retrying != 0 || info.Redeliver != 0 || info.Cursor != 3 || info.Unacked != 1 {
		t.Fatalf("after the reset: %+v", info)
	}
	r.now += 1000
	if res := r.fire(r.sched[0].Ref); res.Fired != 1 {
		t.Fatalf("fire: %+v", res)
	}
	if p := r.pullN("g", "c2", 10); len(p.Entries) != 0 {
		t.Fatalf("an old life's retry came back: %v", consumeSeqs(p))
	}
	// A reset back to the earliest hands everything out again.
	r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: "g", To: StartEarliest})
	if p := r.pullN("g", "c2", 10); !slices.Equal(consumeSeqs(p), []int64{0, 1, 2}) {
		t.Fatalf("after a reset to the earliest: %v", consumeSeqs(p))
	}
	// A reset of an unknown group creates it there.
	res = resultAs[*ConsumerGroupResult](t, r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: "new", To: StartAtTime, At: r.now + 1}))
	if !res.Created || r.group("new").Cursor != 3 {
		t.Fatalf("reset of a new group: %+v, %+v", res, r.group("new"))
	}
	wantInvalid(t, r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: "g", To: StartAtTime + 1}))
	wantInvalid(t, r.apply(&ResetConsumerGroup{Now: r.now, Subject: "s", ConsumerGroup: "g", To: StartAtTime, At: -1}))
}

// SetGroup changes only the settings its bits name and refuses settings
// out of bounds or unknown bits, changing nothing.
func TestSetGroupPartial(t *testing.T) {
	r := newGroupRig(t)
	if res := r.setGroup("g", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 7, AckWait: 5000}); !res.Created {
		t.Fatalf("set of a new group: %+v", res)
	}
	want := DefaultConsumerGroupSettings()
	want.MaxDeliveries = 7
	if got := r.group("g").Settings; got != want {
		t.Fatalf("settings %+v, want %+v", got, want)
	}
	r.setGroup("g", SetAckWait|SetIdleExpiry, ConsumerGroupSettings{AckWait: 5000, IdleExpiry: 60_000})
	want.AckWait, want.IdleExpiry = 5000, 60_000
	if got := r.group("g").Settings; got != want {
		t.Fatalf("settings %+v, want %+v", got, want)
	}
	before := stateBytes(r.f)
	for _, c := range []SetConsumerGroup{
		{Set: 1 << 6},
		{Set: SetMaxDeliveries, Settings: ConsumerGroupSettings{MaxDeliveries: 0}},
		{Set: SetMaxDeliveries, Settings: ConsumerGroupSettings{MaxDeliveries: limits.MaxDeliveries + 1}},
		{Set: SetRetryFirst, Settings: ConsumerGroupSettings{RetryFirst: DefaultConsumerGroupSettings().RetryMax + 1}},
		{Set: SetRetryMax, Settings: ConsumerGroupSettings{RetryMax: maxRetryDelay + 1}},
		{Set: SetAckWait, Settings: ConsumerGroupSettings{AckWait: minAckWait - 1}},
		{Set: SetAckWait, Settings: ConsumerGroupSettings{AckWait: maxAckWait + 1}},
		{Set: SetMaxInFlight, Settings: ConsumerGroupSettings{MaxInFlight: 100_001}},
		{Set: SetIdleExpiry, Settings: ConsumerGroupSettings{IdleExpiry: minIdleExpiry - 1}},
		{Set: SetIdleExpiry, Settings: ConsumerGroupSettings{IdleExpiry: maxIdleExpiry + 1}},
		{Start: StartAtTime + 1},
	} {
		c.Now, c.Subject, c.ConsumerGroup = r.now, "s", "g"
		wantInvalid(t, r.apply(&c))
	}
	wantStateUnchanged(t, r.f, before)
	// At the bounds: accepted.
	r.setGroup("g", setAll, ConsumerGroupSettings{MaxDeliveries: limits.MaxDeliveries, RetryFirst: maxRetryDelay, RetryMax: maxRetryDelay,
		AckWait: maxAckWait, MaxInFlight: 100_000, IdleExpiry: maxIdleExpiry})
	r.setGroup("g", setAll, ConsumerGroupSettings{MaxDeliveries: 1, AckWait: minAckWait, IdleExpiry: minIdleExpiry})
}
