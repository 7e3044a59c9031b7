package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

func TestAppendWritesMessageAndConsumeLogs(t *testing.T) {
	f := unitFSM(t)
	a := unitMsg("a", "orders", 10)
	a.Tags = []string{"eu", "vip"}
	a.Properties = []message.Property{{Key: "trace", Value: "x1"}}
	b := unitMsg("b", "payments", 20)
	c := unitMsg("c", "orders", 0)
	res := appendAt(t, f, 1, 5000, a, b, c)
	if len(res.Messages) != 3 {
		t.Fatalf("%d results, want 3", len(res.Messages))
	}
	wantSeq := []int64{0, 0, 1} // per subject
	for i, r := range res.Messages {
		if r.Status != Appended || r.Err != nil || r.Seq != wantSeq[i] {
			t.Fatalf("message %d: %+v, want Appended with seq %d", i, r, wantSeq[i])
		}
		if i > 0 && r.Offset <= res.Messages[i-1].Offset {
			t.Fatalf("offsets do not increase: %+v", res.Messages)
		}
	}
	for _, tc := range []struct {
		subject string
		seq     int64
		want    *message.Message
	}{{"orders", 0, a}, {"payments", 0, b}, {"orders", 1, c}} {
		got, err := f.Message(tc.subject, tc.seq)
		if err != nil {
			t.Fatalf("Message(%s, %d): %v", tc.subject, tc.seq, err)
		}
		if got.Index != 1 || got.AppendedAt != 5000 || got.CreatedAt != 42 {
			t.Fatalf("Message(%s, %d): index %d appended-at %d created-at %d, want 1, 5000, 42",
				tc.subject, tc.seq, got.Index, got.AppendedAt, got.CreatedAt)
		}
		got.Index, got.AppendedAt = tc.want.Index, tc.want.AppendedAt
		if !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("Message(%s, %d) = %+v, want %+v", tc.subject, tc.seq, got, tc.want)
		}
	}
	// The consume-log entry points at the message and carries its tags.
	e, err := f.store.consumeLog("orders").Get(0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Offset != res.Messages[0].Offset || e.AppendedAt != 5000 || e.TagMask != message.TagMask(a.Tags) {
		t.Fatalf("consume entry %+v", e)
	}
	if _, err := f.Message("orders", 2); !errors.Is(err, logs.ErrBeyondEnd) {
		t.Fatalf("Message past the end: %v, want ErrBeyondEnd", err)
	}
	if _, err := f.Message("nothing", 0); !errors.Is(err, ErrNoSubject) {
		t.Fatalf("Message of an unknown subject: %v, want ErrNoSubject", err)
	}
	if got := f.store.messages.Log().End(); got != res.Messages[2].Offset+int64(logs.RecordSize(len(c.AppendEncoded(nil)))) {
		t.Fatalf("message log ends at %d, want just after the third message", got)
	}
}

func TestAppendDuplicates(t *testing.T) {
	f := unitFSM(t)
	first := appendAt(t, f, 1, 1000, unitMsg("x", "s", 5))
	end := f.store.messages.Log().End()

	// A retry in a later command, and twice inside one batch.
	res := appendAt(t, f, 2, 2000, unitMsg("x", "s", 6), unitMsg("y", "s", 5), unitMsg("y", "s", 5), unitMsg("x", "t", 1))
	want := []MessageResult{
		{Status: Duplicate, Offset: first.Messages[0].Offset, Seq: -1},
		{Status: Appended, Offset: end, Seq: 1},
		{Status: Duplicate, Offset: end, Seq: -1},
		{Status: Duplicate, Offset: first.Messages[0].Offset, Seq: -1},
	}
	if !reflect.DeepEqual(res.Messages, want) {
		t.Fatalf("results %+v, want %+v", res.Messages, want)
	}
	if n := f.store.consumeLog("s").EndSeq(); n != 2 {
		t.Fatalf("consume log of s holds %d entries, want 2", n)
	}
	if f.store.consumeLog("t") != nil {
		t.Fatal("a duplicate created a consume log")
	}

	// At the edge of the window the id is still remembered; just past it,
	// it is appended again.
	window := f.cfg.DedupWindow.Milliseconds()
	before := f.store.messages.Log().End()
	res = appendAt(t, f, 3, 1000+window, unitMsg("x", "s", 5))
	if res.Messages[0].Status != Duplicate || f.store.messages.Log().End() != before {
		t.Fatalf("at the window's edge: %+v, want Duplicate and nothing appended", res.Messages[0])
	}
	res = appendAt(t, f, 4, 1000+window+1, unitMsg("x", "s", 5), unitMsg("x", "s", 5))
	if res.Messages[0].Status != Appended || res.Messages[0].Seq != 2 {
		t.Fatalf("after the window: %+v, want Appended at seq 2", res.Messages[0])
	}
	if res.Messages[1].Status != Duplicate || res.Messages[1].Offset != res.Messages[0].Offset {
		t.Fatalf("the re-appended id is remembered again: %+v", res.Messages[1])
	}
	// y was appended at 2000: still within the window.
	if res := appendAt(t, f, 5, 1000+window+1, unitMsg("y", "s", 5)); res.Messages[0].Status != Duplicate {
		t.Fatalf("y: %+v, want Duplicate", res.Messages[0])
	}
}

func TestAppendRejectsInvalidSubject(t *testing.T) {
	for i, subject := range []string{"a/b", "../x", ".hidden", "with space", "-x", "ok\x00"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			f := unitFSM(t)
			appendAt(t, f, 1, 1000, unitMsg("ok", "good", 1))
			before, files := stateBytes(f), dataFiles(t, f.cfg.Dir)
			res := appendAt(t, f, 2, 1000, unitMsg("bad", subject, 1), unitMsg("bad", subject, 1))
			for i, r := range res.Messages {
				if r.Status != Rejected || !errors.Is(r.Err, ErrInvalid) || r.Seq != -1 {
					t.Fatalf("message %d: %+v, want Rejected wrapping ErrInvalid", i, r)
				}
			}
			wantStateUnchanged(t, f, before)
			if after := dataFiles(t, f.cfg.Dir); !reflect.DeepEqual(files, after) {
				t.Fatal("a rejected message changed the data files")
			}
			// The rejected id was not remembered.
			if r := appendAt(t, f, 3, 1000, unitMsg("bad", "good", 1)); r.Messages[0].Status != Appended {
				t.Fatalf("id of a rejected message: %+v, want Appended", r.Messages[0])
			}
		})
	}
}

func TestLeaderTimeNeverGoesBack(t *testing.T) {
	f := unitFSM(t)
	steps := []struct {
		cmd  encoder
		want int64
	}{
		{&Append{Now: 5000, Messages: []*message.Message{unitMsg("a", "s", 1)}}, 5000},
		{&Append{Now: 3000, Messages: []*message.Message{unitMsg("b", "s", 1)}}, 5000}, // new leader behind
		{&Pull{Start: StartEarliest, Now: 4000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}, 5000},
		{&Pull{Start: StartEarliest, Now: 7000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}, 7000},
		{&Ack{Now: 6000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 1}}}, 7000},
		{&Reclaim{Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c"}, 7000},
		{&Append{Now: 6500, Messages: []*message.Message{unitMsg("c", "s", 1)}}, 7000},
	}
	for i, s := range steps {
		if r, ok := applyAt(f, uint64(i+1), s.cmd).(error); ok {
			t.Fatalf("step %d: %v", i, r)
		}
		if f.st.now != s.want {
			t.Fatalf("step %d (%T): state time %d, want %d", i, s.cmd, f.st.now, s.want)
		}
	}
	for seq, want := range []int64{5000, 5000, 7000} {
		m, err := f.Message("s", int64(seq))
		if err != nil {
			t.Fatal(err)
		}
		if m.AppendedAt != want {
			t.Fatalf("message %d appended at %d, want %d (clamped)", seq, m.AppendedAt, want)
		}
	}
}

// appendN appends n messages with ids prefix-0… to subject at index.
func appendN(tb testing.TB, f *FSM, index uint64, subject, prefix string, n int) {
	tb.Helper()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = unitMsg(fmt.Sprintf("%s-%d", prefix, i), subject, 8)
	}
	for i, r := range appendAt(tb, f, index, 1000, msgs...).Messages {
		if r.Status != Appended {
			tb.Fatalf("message %d: %+v", i, r)
		}
	}
}

func TestPullHandsOutInOrder(t *testing.T) {
	f := unitFSM(t, func(c *Config) { c.MaxPull = 5; c.MaxUnacked = 8 })
	appendN(t, f, 1, "s", "m", 20)
	idx := uint64(2)
	pull := func(group, consumer string, n int) []int64 {
		t.Helper()
		idx++
		return consumeSeqs(pullAt(t, f, idx, 1000, "s", group, consumer, n))
	}
	// A new group starts at the start; Max, MaxPull and MaxUnacked cap it.
	if got := pull("g", "c1", 3); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("first pull %v", got)
	}
	if got := pull("g", "c1", 100); !slices.Equal(got, []int64{3, 4, 5, 6, 7}) {
		t.Fatalf("pull capped by MaxPull: %v", got)
	}
	if got := pull("g", "c1", 100); len(got) != 0 {
		t.Fatalf("pull beyond MaxUnacked: %v", got)
	}
	idx++
	ackAt(t, f, idx, 1000, "s", "g", "c1", message.AckRange{First: 0, Last: 1})
	if got := pull("g", "c1", 100); !slices.Equal(got, []int64{8, 9}) {
		t.Fatalf("pull after acking 2: %v", got)
	}
	// Pull sequences count per consumer.
	idx++
	r := pullAt(t, f, idx, 1000, "s", "g", "c2", 2)
	want := []Pulled{{PullSeq: 0, ConsumeSeq: 10, Deliveries: 1}, {PullSeq: 1, ConsumeSeq: 11, Deliveries: 1}}
	if !reflect.DeepEqual(r.Entries, want) {
		t.Fatalf("second consumer got %+v, want %+v", r.Entries, want)
	}
	// Another group gets every message from the start.
	if got := pull("other", "c1", 5); !slices.Equal(got, seqRange(0, 5)) {
		t.Fatalf("second group: %v", got)
	}
}

func TestPullGroupsShareAndGroupsAreIndependent(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 30)
	idx := uint64(1)
	got := map[string][]int64{}
	for round := range 6 {
		for _, gc := range [][2]string{{"g1", "a"}, {"g1", "b"}, {"g2", "a"}} {
			idx++
			r := pullAt(t, f, idx, 1000, "s", gc[0], gc[1], 1+round%3)
			got[gc[0]+"/"+gc[1]] = append(got[gc[0]+"/"+gc[1]], consumeSeqs(r)...)
		}
	}
	g1 := append(slices.Clone(got["g1/a"]), got["g1/b"]...)
	slices.Sort(g1)
	if !slices.Equal(g1, seqRange(0, 24)) {
		t.Fatalf("group g1 consumers got %v and %v: want 0..23 split without overlap", got["g1/a"], got["g1/b"])
	}
	if !slices.Equal(got["g2/a"], seqRange(0, 12)) {
		t.Fatalf("group g2 got %v, want 0..11 in order", got["g2/a"])
	}
	// Appending more hands the new entries out too.
	idx++
	appendN(t, f, idx, "s", "more", 2)
	idx++
	if r := pullAt(t, f, idx, 1000, "s", "g1", "a", 100); !slices.Equal(consumeSeqs(r), seqRange(24, 32)) {
		t.Fatalf("after more appends: %v", consumeSeqs(r))
	}
}

func TestPullEmptyAndInvalid(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 3)
	if r := pullAt(t, f, 2, 1000, "none", "g", "c", 10); len(r.Entries) != 0 {
		t.Fatalf("pull of a subject without messages: %+v", r.Entries)
	}
	// Once the subject gets messages, that group starts at its beginning.
	appendN(t, f, 3, "none", "n", 2)
	if r := pullAt(t, f, 4, 1000, "none", "g", "c", 10); !slices.Equal(consumeSeqs(r), []int64{0, 1}) {
		t.Fatalf("pull after the first appends: %v", consumeSeqs(r))
	}
	idx := uint64(4)
	for _, tc := range []struct {
		name string
		cmd  *Pull
	}{
		{"bad subject", &Pull{Start: StartEarliest, Subject: "a/b", ConsumerGroup: "g", Consumer: "c", Max: 1}},
		{"empty group", &Pull{Start: StartEarliest, Subject: "s", ConsumerGroup: "", Consumer: "c", Max: 1}},
		{"bad consumer", &Pull{Start: StartEarliest, Subject: "s", ConsumerGroup: "g", Consumer: "-c", Max: 1}},
		{"max 0", &Pull{Start: StartEarliest, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 0}},
		{"max negative", &Pull{Start: StartEarliest, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stateBytes(f)
			tc.cmd.Now = 99999
			idx++
			wantInvalid(t, applyAt(f, idx, tc.cmd))
			wantStateUnchanged(t, f, before)
		})
	}
	idx++
	if r := pullAt(t, f, idx, 1000, "s", "g", "c", 10); !slices.Equal(consumeSeqs(r), []int64{0, 1, 2}) {
		t.Fatalf("valid pull after refused ones: %v", consumeSeqs(r))
	}
}

func TestAck(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 10)
	pullAt(t, f, 2, 1000, "s", "g", "c", 5) // pull sequences 0..4
	idx := uint64(2)
	ack := func(ranges ...message.AckRange) any {
		idx++
		return applyAt(f, idx, &Ack{Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: ranges})
	}
	steps := []struct {
		ranges []message.AckRange
		want   int64
	}{
		{[]message.AckRange{{First: 2, Last: 3}}, 0},
		{[]message.AckRange{{First: 4, Last: 4}}, 0},
		{[]message.AckRange{{First: 0, Last: 0}}, 1},
		{[]message.AckRange{{First: 0, Last: 0}}, 1}, // again: harmless
		{[]message.AckRange{{First: 1, Last: 1}, {First: 3, Last: 3}}, 5},
		{[]message.AckRange{{First: 0, Last: 4}}, 5},
		{nil, 5},
	}
	for i, s := range steps {
		r := resultAs[*AckResult](t, ack(s.ranges...))
		if r.AckPos != s.want {
			t.Fatalf("step %d: ack %v: position %d, want %d", i, s.ranges, r.AckPos, s.want)
		}
	}
	cs := f.st.byKey[consumerKey{"s", "g", "c"}]
	if cs.ackPos != 5 || len(cs.window) != 0 || cs.unacked() != 0 {
		t.Fatalf("consumer after acking all: %+v", cs)
	}

	// Acks past what was pulled, or malformed, are refused whole.
	pullAt(t, f, idx+1, 1000, "s", "g", "c", 3) // pull sequences 5..7
	idx++
	for _, ranges := range [][]message.AckRange{
		{{First: 5, Last: 8}},
		{{First: 8, Last: 8}},
		{{First: 5, Last: 5}, {First: 9, Last: 9}}, // the valid first range is not applied either
		{{First: 6, Last: 5}},
		{{First: -1, Last: 5}},
	} {
		before := stateBytes(f)
		wantInvalid(t, ack(ranges...))
		wantStateUnchanged(t, f, before)
	}
	if r := resultAs[*AckResult](t, ack(message.AckRange{First: 5, Last: 7})); r.AckPos != 8 {
		t.Fatalf("valid ack after refused ones: position %d, want 8", r.AckPos)
	}

	// Unknown consumers, groups and subjects; bad names.
	for _, cmd := range []*Ack{
		{Subject: "s", ConsumerGroup: "g", Consumer: "nobody"},
		{Subject: "s", ConsumerGroup: "other", Consumer: "c"},
		{Subject: "t", ConsumerGroup: "g", Consumer: "c"},
		{Subject: "s/", ConsumerGroup: "g", Consumer: "c"},
	} {
		before := stateBytes(f)
		idx++
		cmd.Now, cmd.Ranges = 99999, []message.AckRange{{First: 0, Last: 0}}
		wantInvalid(t, applyAt(f, idx, cmd))
		wantStateUnchanged(t, f, before)
	}
}

func TestAckOutOfOrderHoldsWindow(t *testing.T) {
	// Acked entries behind an unacked one still count against MaxUnacked
	// until the ack position passes them.
	f := unitFSM(t, func(c *Config) { c.MaxUnacked = 4 })
	appendN(t, f, 1, "s", "m", 10)
	pullAt(t, f, 2, 1000, "s", "g", "c", 4)
	ackAt(t, f, 3, 1000, "s", "g", "c", message.AckRange{First: 1, Last: 3})
	if r := pullAt(t, f, 4, 1000, "s", "g", "c", 4); len(r.Entries) != 0 {
		t.Fatalf("pull with the head unacked: %v", consumeSeqs(r))
	}
	if r := ackAt(t, f, 5, 1000, "s", "g", "c", message.AckRange{First: 0, Last: 0}); r.AckPos != 4 {
		t.Fatalf("ack position %d, want 4", r.AckPos)
	}
	if r := pullAt(t, f, 6, 1000, "s", "g", "c", 4); !slices.Equal(consumeSeqs(r), seqRange(4, 8)) {
		t.Fatalf("pull after the head was acked: %v", consumeSeqs(r))
	}
}

func TestReclaim(t *testing.T) {
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 10)
	if r := pullAt(t, f, 2, 1000, "s", "g", "c1", 5); !slices.Equal(consumeSeqs(r), seqRange(0, 5)) {
		t.Fatalf("c1 pulled %v", consumeSeqs(r))
	}
	pullAt(t, f, 3, 1000, "s", "other", "c1", 3)
	ackAt(t, f, 4, 1000, "s", "g", "c1", message.AckRange{First: 1, Last: 1}, message.AckRange{First: 3, Last: 3})
	if r := reclaimAt(t, f, 5, 1000, "s", "g", "c1"); r.Reclaimed != 3 {
		t.Fatalf("reclaimed %d, want 3", r.Reclaimed)
	}
	// Another consumer gets the unacked ones first, in pull order, then the
	// cursor's; the acked ones are not handed out again.
	if r := pullAt(t, f, 6, 1000, "s", "g", "c2", 2); !slices.Equal(consumeSeqs(r), []int64{0, 2}) {
		t.Fatalf("c2's first pull: %v, want [0 2]", consumeSeqs(r))
	}
	if r := pullAt(t, f, 7, 1000, "s", "g", "c2", 3); !slices.Equal(consumeSeqs(r), []int64{4, 5, 6}) {
		t.Fatalf("c2's second pull: %v, want [4 5 6]", consumeSeqs(r))
	}
	// c1 is forgotten: a late ack for what it held is refused and changes nothing.
	before := stateBytes(f)
	if err, ok := applyAt(f, 8, &Ack{Now: 1000, Subject: "s", ConsumerGroup: "g", Consumer: "c1", Ranges: []message.AckRange{{First: 0, Last: 4}}}).(error); !ok || !errors.Is(err, ErrInvalid) {
		t.Fatalf("late ack from a reclaimed consumer: %v, want ErrInvalid", err)
	}
	wantStateUnchanged(t, f, before)
	// c1 may come back: it is registered afresh, pull sequences from 0, new entries.
	r := pullAt(t, f, 9, 1000, "s", "g", "c1", 10)
	if len(r.Entries) != 3 || r.Entries[0].PullSeq != 0 || r.Entries[0].ConsumeSeq != 7 {
		t.Fatalf("c1 after reclaim: %+v", r.Entries)
	}
	// The other group's entries were not touched.
	if cs := f.st.byKey[consumerKey{"s", "other", "c1"}]; cs.unacked() != 3 {
		t.Fatalf("the other group's consumer holds %d unacked, want 3", cs.unacked())
	}
	if g := f.st.groups[groupKey{"s", "g"}]; len(g.redeliver) != 0 {
		t.Fatalf("redelivery queue %v, want empty", g.redeliver)
	}
	// Unknown consumers reclaim nothing, and reclaiming twice is harmless.
	for i, c := range []*Reclaim{
		{Subject: "s", ConsumerGroup: "g", Consumer: "ghost"},
		{Subject: "x", ConsumerGroup: "g", Consumer: "c1"},
		{Subject: "s", ConsumerGroup: "g", Consumer: "c2"},
		{Subject: "s", ConsumerGroup: "g", Consumer: "c2"},
	} {
		res := resultAs[*ReclaimResult](t, applyAt(f, uint64(10+i), c))
		if want := []int{0, 0, 5, 0}[i]; res.Reclaimed != want {
			t.Fatalf("reclaim %d: %d, want %d", i, res.Reclaimed, want)
		}
	}
	if _, ok := f.st.byKey[consumerKey{"s", "g", "ghost"}]; ok {
		t.Fatal("reclaim registered an unknown consumer")
	}
	wantInvalid(t, applyAt(f, 14, &Reclaim{Subject: "s", ConsumerGroup: "g", Consumer: ""}))
}

func TestApplySkipsAppliedIndices(t *testing.T) {
	f := unitFSM(t)
	e1 := unitEntry(1, &Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 1)}})
	if r := resultAs[*AppendResult](t, f.Apply(e1)); r.Messages[0].Status != Appended {
		t.Fatalf("%+v", r.Messages)
	}
	e2 := unitEntry(2, &Pull{Start: StartEarliest, Now: 1, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1})
	f.Apply(e2)
	before, files := stateBytes(f), dataFiles(t, f.cfg.Dir)
	for _, e := range []*raft.Log{e1, e2, unitEntry(2, &Append{Now: 1, Messages: []*message.Message{unitMsg("b", "s", 1)}})} {
		if r := f.Apply(e); r != nil {
			t.Fatalf("re-applying index %d: %v, want nil", e.Index, describe(r))
		}
	}
	wantStateUnchanged(t, f, before)
	if !reflect.DeepEqual(files, dataFiles(t, f.cfg.Dir)) {
		t.Fatal("re-applied entries changed the data files")
	}
	if f.Applied() != 2 {
		t.Fatalf("Applied %d, want 2", f.Applied())
	}

	// A batch: one response per entry, nil for skipped and non-command ones.
	batch := []*raft.Log{
		e1,
		e2,
		unitEntry(3, &Append{Now: 2, Messages: []*message.Message{unitMsg("b", "s", 1)}}),
		{Index: 4, Type: raft.LogConfiguration},
		{Index: 5, Type: raft.LogNoop},
		{Index: 6, Type: raft.LogBarrier},
		unitEntry(7, &Pull{Start: StartEarliest, Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5}),
		unitEntry(7, &Pull{Start: StartEarliest, Now: 2, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5}),
	}
	out := f.ApplyBatch(batch)
	if len(out) != len(batch) {
		t.Fatalf("%d responses for %d entries", len(out), len(batch))
	}
	for i, want := range []string{"nil", "nil", "append {1 ", "nil", "nil", "nil", "pull [{1 1 1 {0 0}}]", "nil"} {
		if got := describe(out[i]); !strings.HasPrefix(got, want) {
			t.Fatalf("response %d: %s, want %s…", i, got, want)
		}
	}
	if f.Applied() != 7 || f.st.applied != 7 {
		t.Fatalf("Applied %d, want 7", f.Applied())
	}
	if out := f.ApplyBatch([]*raft.Log{{Index: 8, Type: raft.LogConfiguration}}); len(out) != 1 || out[0] != nil || f.Applied() != 8 {
		t.Fatalf("configuration entry: %v, applied %d", out, f.Applied())
	}
	if out := f.ApplyBatch(nil); len(out) != 0 || f.Applied() != 8 {
		t.Fatalf("empty batch: %v, applied %d", out, f.Applied())
	}
}

func TestApplyRefusesMalformedCommand(t *testing.T) {
	// The same bytes fail alike on every replica: a deterministic refusal
	// that changes nothing but the applied index, never a panic.
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 1)
	before := stateBytes(f)
	r := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{byte(CmdPull), commandVersion, 1}})
	wantInvalid(t, r)
	if !errors.Is(r.(error), ErrBadCommand) {
		t.Fatalf("response %v, want ErrBadCommand", r)
	}
	wantStateUnchanged(t, f, before)
	if f.Applied() != 2 {
		t.Fatalf("applied %d, want 2", f.Applied())
	}
}

func TestApplyStopsOnUnknownCommand(t *testing.T) {
	// A command of a type or version this build does not know comes from a
	// newer leader: replicas that know it apply it, so skipping it would
	// diverge. The replica stops instead (no panic), naming the fix.
	for name, tc := range map[string]struct {
		data []byte
		says string
	}{
		"type":    {[]byte{99, commandVersion, 0, 0, 0, 0, 0, 0, 0, 0}, "type 99"},
		"version": {[]byte{byte(CmdPull), commandVersion + 7, 0, 0, 0, 0, 0, 0, 0, 0}, "pull version 8"},
	} {
		t.Run(name, func(t *testing.T) {
			var fatal []error
			f := unitFSM(t, func(c *Config) {
				c.Group = "g1"
				c.OnFatal = func(err error) { fatal = append(fatal, err) }
			})
			appendN(t, f, 1, "s", "m", 1)
			r := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: tc.data})
			err, _ := r.(error)
			if !errors.Is(err, ErrStopped) || !errors.Is(err, ErrNeedsUpgrade) {
				t.Fatalf("answered %v, want ErrStopped for ErrNeedsUpgrade", r)
			}
			msg := f.Stopped().Error()
			for _, want := range []string{"entry 2", tc.says, "applies versions 1-2", "broker group g1 is at version 1", "run the release of the group's leader"} {
				if !strings.Contains(msg, want) {
					t.Errorf("stopped with %q, which does not say %q", msg, want)
				}
			}
			if len(fatal) != 1 || fatal[0] != f.Stopped() {
				t.Fatalf("OnFatal told %v", fatal)
			}
			if f.Applied() != 1 {
				t.Fatalf("applied %d, want 1: the entry is not applied", f.Applied())
			}
			if r := appendAt2(f, 3); !errors.Is(r.(error), ErrStopped) {
				t.Fatalf("the next entry answered %v, want ErrStopped", r)
			}
		})
	}
}

// appendAt2 applies an Append of one message at index, answering what
// Apply does.
func appendAt2(f *FSM, index uint64) any {
	return applyAt(f, index, &Append{Now: 1, Messages: []*message.Message{unitMsg("x", "s", 1)}})
}

func TestReadsDuringApply(t *testing.T) {
	// Message and Ends are safe while the FSM goroutine applies (run with -race).
	f := unitFSM(t)
	appendN(t, f, 1, "s", "m", 1)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	var readErr error
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			e := f.Ends()
			n := e.Consume["s"] / logs.ConsumeRecordSize
			m, err := f.Message("s", n-1)
			if err != nil || m.Subject != "s" {
				readErr = fmt.Errorf("Message(s, %d) with consume end %d: %v", n-1, e.Consume["s"], err)
				return
			}
		}
	}()
	for i := uint64(2); i < 200; i++ {
		appendN(t, f, i, "s", fmt.Sprint("m", i), 3)
	}
	close(stop)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"minimums", func(c *Config) {
			c.SegmentSize, c.IndexSegmentSize, c.DedupWindow, c.MaxUnacked, c.MaxPull = 1<<20, 64<<10, 0, 1, 1
		}, ""},
		{"retention", func(c *Config) { c.Retention = logs.Retention{MaxAge: 1, MaxBytes: 1} }, ""},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir"},
		{"maximums", func(c *Config) {
			c.SegmentSize, c.IndexSegmentSize, c.DedupWindow, c.MaxUnacked, c.MaxPull = limits.MaxSegmentSize, limits.MaxIndexSegmentSize,
				limits.MaxDedupWindow, limits.MaxMaxUnacked, limits.MaxMaxPull
			c.Retention = logs.Retention{MaxAge: limits.MaxRetentionAge.Milliseconds(), MaxBytes: limits.MaxRetentionBytes}
		}, ""},
		{"small segments", func(c *Config) { c.SegmentSize = 1<<20 - 1 }, "segment-size"},
		{"zero segments", func(c *Config) { c.SegmentSize = 0 }, "segment-size"},
		{"large segments", func(c *Config) { c.SegmentSize = limits.MaxSegmentSize + 1 }, "segment-size"},
		{"small index segments", func(c *Config) { c.IndexSegmentSize = 64<<10 - 1 }, "index-segment-size"},
		{"large index segments", func(c *Config) { c.IndexSegmentSize = limits.MaxIndexSegmentSize + 1 }, "index-segment-size"},
		{"negative window", func(c *Config) { c.DedupWindow = -time.Millisecond }, "dedup-window"},
		{"long window", func(c *Config) { c.DedupWindow = limits.MaxDedupWindow + time.Millisecond }, "dedup-window"},
		{"zero unacked", func(c *Config) { c.MaxUnacked = 0 }, "max-unacked"},
		{"many unacked", func(c *Config) { c.MaxUnacked = limits.MaxMaxUnacked + 1 }, "max-unacked"},
		{"negative pull", func(c *Config) { c.MaxPull = -1 }, "max-pull"},
		{"large pull", func(c *Config) { c.MaxPull = limits.MaxMaxPull + 1 }, "max-pull"},
		{"long retention", func(c *Config) { c.Retention.MaxAge = limits.MaxRetentionAge.Milliseconds() + 1 }, "retention-age"},
		{"large retention", func(c *Config) { c.Retention.MaxBytes = limits.MaxRetentionBytes + 1 }, "retention-size"},
		{"negative age", func(c *Config) { c.Retention.MaxAge = -1 }, "retention"},
		{"negative bytes", func(c *Config) { c.Retention.MaxBytes = -1 }, "retention"},
		{"no logger", func(c *Config) { c.Logger = nil }, "Logger"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(dir)
			tc.mutate(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error about %s", err, tc.want)
			}
			if tc.want != "" {
				if _, err := Open(cfg); err == nil {
					t.Fatal("Open accepted an invalid configuration")
				}
			}
		})
	}
	if cfg := DefaultConfig(dir); cfg.Logger == nil || cfg.DedupWindow != 10*time.Minute || cfg.MaxPull != 1000 {
		t.Fatalf("DefaultConfig: %+v", cfg)
	}
}

// retentionFSM returns an FSM with 1 MiB message segments and the given
// retention.
func retentionFSM(tb testing.TB, r logs.Retention) *FSM {
	return unitFSM(tb, func(c *Config) { c.Retention = r })
}

// bigMsg returns a message with a body of about 100 KiB: ten fill a
// message-log segment.
func bigMsg(id, subject string) *message.Message { return unitMsg(id, subject, 100<<10) }

func TestRetentionByBytes(t *testing.T) {
	const maxBytes = 3 << 20
	f := retentionFSM(t, logs.Retention{MaxBytes: maxBytes})
	idx := uint64(0)
	// A group that keeps up, and one that is behind with unacked entries
	// reclaimed for redelivery.
	var seqs []int64
	for i := range 60 {
		idx++
		res := appendAt(t, f, idx, 1000, bigMsg(fmt.Sprint("m", i), "s"))
		seqs = append(seqs, res.Messages[0].Seq)
		if i == 5 {
			idx++
			pullAt(t, f, idx, 1000, "s", "late", "c1", 3)
			idx++
			reclaimAt(t, f, idx, 1000, "s", "late", "c1")
		}
		if i%5 == 4 {
			idx++
			r := pullAt(t, f, idx, 1000, "s", "live", "c", 100)
			idx++
			ackAt(t, f, idx, 1000, "s", "live", "c", message.AckRange{First: r.Entries[0].PullSeq, Last: r.Entries[len(r.Entries)-1].PullSeq})
		}
	}
	if !slices.Equal(seqs, seqRange(0, 60)) {
		t.Fatalf("sequences %v", seqs)
	}
	ml := f.store.messages.Log()
	segs := ml.Segments()
	var total int64
	for _, s := range segs {
		total += s.Size
	}
	// Sealed segments are removed while the log is above MaxBytes.
	if ml.Start() == 0 || total-segs[0].Size > maxBytes || total > maxBytes+segs[0].Size {
		t.Fatalf("message log starts at %d with %d segments of %d bytes", ml.Start(), len(segs), total)
	}
	entries, _ := os.ReadDir(filepath.Join(f.cfg.Dir, dataDir, messagesDir))
	if len(entries) != len(segs) {
		t.Fatalf("%d segment files, %d segments", len(entries), len(segs))
	}
	// The first retained subject sequence: the first whose message is still there.
	first := int64(-1)
	for seq := range int64(60) {
		_, err := f.Message("s", seq)
		if err == nil {
			if first < 0 {
				first = seq
			}
			continue
		}
		if first >= 0 || !errors.Is(err, logs.ErrRetained) {
			t.Fatalf("Message(s, %d): %v", seq, err)
		}
	}
	if first <= 0 {
		t.Fatalf("first retained sequence %d", first)
	}
	// A new group, and the late group (its redelivery queue and its cursor
	// point at removed messages), start at the first retained message.
	for _, group := range []string{"new", "late"} {
		idx++
		r := pullAt(t, f, idx, 1000, "s", group, "c2", 100)
		if got := consumeSeqs(r); !slices.Equal(got, seqRange(first, 60)) {
			t.Fatalf("group %s pulled %v, want %d..59", group, got, first)
		}
	}
	// The group that kept up is unaffected.
	idx++
	appendAt(t, f, idx, 1000, bigMsg("last", "s"))
	idx++
	if r := pullAt(t, f, idx, 1000, "s", "live", "c", 100); !slices.Equal(consumeSeqs(r), []int64{60}) {
		t.Fatalf("live group pulled %v", consumeSeqs(r))
	}
	// An id whose message was removed is no longer a duplicate, though it
	// is within the dedup window.
	idx++
	if r := appendAt(t, f, idx, 1000, bigMsg("m0", "s"), bigMsg("m59", "s")); r.Messages[0].Status != Appended || r.Messages[1].Status != Duplicate {
		t.Fatalf("re-sent ids: %+v", r.Messages)
	}
}

func TestRetentionByAge(t *testing.T) {
	const maxAge = 60_000
	f := retentionFSM(t, logs.Retention{MaxAge: maxAge})
	idx := uint64(0)
	for i := range 25 {
		idx++
		appendAt(t, f, idx, 1000, bigMsg(fmt.Sprint("m", i), "s"))
	}
	ml := f.store.messages.Log()
	if n := len(ml.Segments()); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}
	// An append exactly MaxAge later does not remove anything yet.
	idx++
	appendAt(t, f, idx, 1000+maxAge, bigMsg("edge", "s"))
	if ml.Start() != 0 {
		t.Fatalf("message log starts at %d at the edge of MaxAge", ml.Start())
	}
	// A millisecond later every sealed segment is too old, but pulls and
	// acks do not run retention.
	idx++
	pullAt(t, f, idx, 1000+maxAge+1, "s", "g", "c", 1)
	idx++
	ackAt(t, f, idx, 1000+maxAge+1, "s", "g", "c", message.AckRange{First: 0, Last: 0})
	if ml.Start() != 0 {
		t.Fatalf("message log starts at %d after a pull", ml.Start())
	}
	// The next append does, at the state's time even when the leader's
	// clock is behind.
	idx++
	appendAt(t, f, idx, 5, bigMsg("late", "s"))
	segs := ml.Segments()
	if len(segs) != 1 || ml.Start() != segs[0].Base || ml.Start() == 0 {
		t.Fatalf("after MaxAge: %d segments, start %d", len(segs), ml.Start())
	}
	if m, err := f.Message("s", 26); err != nil || m.AppendedAt != 1000+maxAge+1 {
		t.Fatalf("the last message: %+v, %v; want appended at the clamped time", m, err)
	}
	if _, err := f.Message("s", 19); !errors.Is(err, logs.ErrRetained) {
		t.Fatalf("Message(s, 19): %v, want ErrRetained", err)
	}
	if m, err := f.Message("s", 20); err != nil || m.ID != "m20" {
		t.Fatalf("Message(s, 20): %v, %v", m, err)
	}
	idx++
	if r := pullAt(t, f, idx, 5, "s", "new", "c", 100); !slices.Equal(consumeSeqs(r), seqRange(20, 27)) {
		t.Fatalf("new group pulled %v, want 20..26", consumeSeqs(r))
	}
	// The group that had pulled sequence 0 continues where the log starts.
	idx++
	if r := pullAt(t, f, idx, 5, "s", "g", "c", 100); !slices.Equal(consumeSeqs(r), seqRange(20, 27)) {
		t.Fatalf("old group pulled %v, want 20..26", consumeSeqs(r))
	}
	if f.st.now != 1000+maxAge+1 {
		t.Fatalf("state time %d, want %d", f.st.now, 1000+maxAge+1)
	}
}

func TestRetentionRemovesIndexSegments(t *testing.T) {
	// ~1 KB messages: a 1 MiB message segment holds about 1,000; a 64 KiB
	// consume segment 1,638 entries and a pull segment 2,048.
	f := unitFSM(t, func(c *Config) {
		c.Retention.MaxBytes = 2 << 20
		c.MaxPull, c.MaxUnacked = 10_000, 10_000
	})
	idx := uint64(0)
	appendBatch := func(prefix string) {
		t.Helper()
		msgs := make([]*message.Message, 500)
		for i := range msgs {
			msgs[i] = unitMsg(fmt.Sprintf("%s-%d", prefix, i), "s", 1000)
		}
		idx++
		appendAt(t, f, idx, 1000, msgs...)
	}
	keepUp := func() { // the fast group pulls and acks everything
		t.Helper()
		idx++
		r := pullAt(t, f, idx, 1000, "s", "fast", "c", 1000)
		idx++
		ackAt(t, f, idx, 1000, "s", "fast", "c", message.AckRange{First: r.Entries[0].PullSeq, Last: r.Entries[len(r.Entries)-1].PullSeq})
	}
	appendBatch("a")
	idx++
	pullAt(t, f, idx, 1000, "s", "slow", "c", 10) // held unacked: pins the pull log
	keepUp()
	for i := range 9 {
		appendBatch(fmt.Sprint("b", i))
		keepUp()
	}
	cl, pl := f.store.consumeLog("s"), f.store.pulls.Log()
	if cl.StartSeq() == 0 {
		t.Fatalf("consume log still starts at 0 (message log starts at %d)", f.store.messages.Log().Start())
	}
	if cl.StartSeq()%1638 != 0 || cl.EndSeq() != 5000 {
		t.Fatalf("consume log spans %d..%d", cl.StartSeq(), cl.EndSeq())
	}
	if pl.Start() != 0 {
		t.Fatalf("pull log starts at %d while an unacked entry at position 0 needs it", pl.Start())
	}
	// Once the slow consumer acks, the pull log's old segments go too, the
	// next time retention removes message-log segments.
	idx++
	ackAt(t, f, idx, 1000, "s", "slow", "c", message.AckRange{First: 0, Last: 9})
	for i := range 3 {
		appendBatch(fmt.Sprint("d", i))
		keepUp()
	}
	if pl.Start() == 0 || pl.Start()%logs.PullRecordSize != 0 {
		t.Fatalf("pull log starts at %d after every entry was acked", pl.Start())
	}
	if got, err := f.store.pulls.Get(pl.Start() / logs.PullRecordSize); err != nil || got.Consumer != 2 { // the second consumer's epoch
		t.Fatalf("first retained pull entry %+v, %v", got, err)
	}
	// Pulls skip entries whose messages are gone, even those the consume
	// log still holds.
	idx++
	first := consumeSeqs(pullAt(t, f, idx, 1000, "s", "new", "c", 1))
	if len(first) != 1 || first[0] < cl.StartSeq() {
		t.Fatalf("new group pulled %v", first)
	}
	if _, err := f.Message("s", first[0]); err != nil {
		t.Fatalf("pulled an entry whose message is gone: %v", err)
	}
	if _, err := f.Message("s", first[0]-1); !errors.Is(err, logs.ErrRetained) {
		t.Fatalf("the entry before the first pulled: %v, want ErrRetained", err)
	}
}

// TestHoldsEndsTheWindowByTheClockGiven: Holds finds an id appended, or
// scheduled for later, within the window ending at the time it is given,
// or the state's, whichever is later, as an Append stamped then would; an
// id past it is held nowhere. A drained group applies little, and its
// state's time alone kept ids past their window: a resend told it was a
// duplicate was stored nowhere.
func TestHoldsEndsTheWindowByTheClockGiven(t *testing.T) {
	f := unitFSM(t)
	window := f.cfg.DedupWindow.Milliseconds()
	later := unitMsg("later", "s", 5)
	later.DeliverAt = 1000 + 2*window + 3_600_000
	appendAt(t, f, 1, 1000, unitMsg("now", "s", 5), later)
	for _, c := range []struct {
		at   int64
		want bool
	}{{0, true}, {1000 + window, true}, {1000 + window + 1, false}} {
		held, err := f.Holds([]string{"now", "later", "never"}, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if want := []bool{c.want, c.want, false}; !reflect.DeepEqual(held, want) {
			t.Fatalf("at %d: held %v, want %v", c.at, held, want)
		}
	}
	// An Append stamped past the window stores both again.
	res := appendAt(t, f, 2, 1000+window+1, unitMsg("now", "s", 5), later)
	for i, r := range res.Messages {
		if r.Status == Duplicate {
			t.Fatalf("message %d past the window: %+v, want stored", i, r)
		}
	}
}
