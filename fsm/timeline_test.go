package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// timelineOf returns the timeline of the message of id (which must be
// stored once) as "kind group/consumer #delivery" lines, and its events.
func timelineOf(t *testing.T, f *FSM, id string) ([]string, []Event) {
	t.Helper()
	found, err := f.FindMessage(id, 0, 0)
	if err != nil || len(found) != 1 {
		t.Fatalf("FindMessage(%s) = %d messages, %v", id, len(found), err)
	}
	events, more, err := f.Timeline(found[0], 0)
	if err != nil || more {
		t.Fatalf("Timeline(%s): more %v, %v", id, more, err)
	}
	var lines []string
	for _, e := range events {
		line := e.Kind.String()
		if e.Group != "" {
			line += fmt.Sprintf(" %s/%s #%d", e.Group, e.Consumer, e.Delivery)
		}
		lines = append(lines, line)
	}
	return lines, events
}

func wantLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// timelineWorkload applies, on r, what a message's life may hold: sent by
// an application from an address, handed out, nacked, handed out again
// and acked in one group; reclaimed in a second; dead-lettered and resent
// in a third; and a delayed message that fires.
func timelineWorkload(t *testing.T, r *groupRig) (delayedRef uint64) {
	t.Helper()
	apps := []Sender{{App: "orders", MaxDelayed: 10, Addr: "10.0.0.7:5000"}, {Addr: "10.0.0.8:6000"}}
	m, other, d := unitMsg("m", "s", 8), unitMsg("x", "s", 8), unitMsg("d", "s", 8)
	d.DeliverAt = r.now + 60_000
	res := resultAs[*AppendResult](t, r.apply(&Append{Now: r.now, Messages: []*message.Message{other, m, d}, Apps: apps, Senders: []int{2, 1, 1}}))
	if res.Messages[1].Status != Appended || res.Messages[2].Status != Scheduled {
		t.Fatalf("append: %+v", res.Messages)
	}
	r.now += 10
	r.pullN("g", "c1", 2)
	r.nack("g", "c1", r.now, message.AckRange{First: 1, Last: 1}) // m, at once
	r.now += 10
	if p := r.pullN("g", "c1", 1); len(p.Entries) != 1 || p.Entries[0].Deliveries != 2 {
		t.Fatalf("second pull: %+v", p.Entries)
	}
	r.ack("g", "c1", message.AckRange{First: 0, Last: 2})
	r.pullN("r", "c2", 2)
	resultAs[*ReclaimResult](t, r.apply(&Reclaim{Now: r.now, Subject: "s", ConsumerGroup: "r", Consumer: "c2"}))
	r.setGroup("dl", SetMaxDeliveries, ConsumerGroupSettings{MaxDeliveries: 1})
	r.pullN("dl", "c3", 2)
	r.nack("dl", "c3", 0, message.AckRange{First: 0, Last: 1})
	resultAs[*DeadLettersResult](t, r.apply(&DeadLetters{Now: r.now, Subject: "s", ConsumerGroup: "dl", Op: DeadResend, Seqs: []int64{1}, By: "app:ops"}))
	r.now = d.DeliverAt
	if fr := r.fire(res.Messages[2].Ref); fr.Fired != 1 {
		t.Fatalf("fire: %+v", fr)
	}
	return res.Messages[2].Ref
}

// The timeline tells, from the replicated record alone, everything that
// happened to a message: who sent it from where, each hand-out with its
// delivery, the nack with its retry time, the ack, the reclaim, the dead
// letter and who resent it; a delayed message's due time and its firing.
func TestTimeline(t *testing.T) {
	r := newGroupRig(t).v2()
	start := r.now
	timelineWorkload(t, r)
	lines, events := timelineOf(t, r.f, "m")
	wantLines(t, "timeline of m", lines, []string{
		"sent",
		"handed-out g/c1 #1", "nacked g/c1 #1", "handed-out g/c1 #2", "acked g/c1 #2",
		"handed-out r/c2 #1", "reclaimed r/c2 #1",
		"handed-out dl/c3 #1", "nacked dl/c3 #1", "dead-lettered dl/c3 #1", "resent dl/ #1",
	})
	if s := events[0]; s.App != "orders" || s.Addr != "10.0.0.7:5000" || s.At != start || s.Index != 2 || s.Due != 0 { // 1 is the SetVersion
		t.Fatalf("sent event %+v", s)
	}
	if n := events[2]; n.Due != start+10 || n.At != start+10 {
		t.Fatalf("nacked event %+v, want a retry at %d", n, start+10)
	}
	if rs := events[len(events)-1]; rs.App != "app:ops" {
		t.Fatalf("resent event %+v, want by app:ops", rs)
	}
	for i := 1; i < len(events); i++ {
		if events[i].Index <= events[i-1].Index && events[i].Kind != EventDeadLettered {
			t.Fatalf("events out of order: %+v then %+v", events[i-1], events[i])
		}
	}
	// Another message of the batch names its own sender: an address alone.
	_, xe := timelineOf(t, r.f, "x")
	if xe[0].App != "" || xe[0].Addr != "10.0.0.8:6000" {
		t.Fatalf("sent event of x %+v", xe[0])
	}
	lines, events = timelineOf(t, r.f, "d")
	wantLines(t, "timeline of d", lines, []string{"sent", "fired"})
	if s := events[0]; s.App != "orders" || s.Addr != "10.0.0.7:5000" || s.At != start || s.Due != start+60_000 || s.Index != 2 {
		t.Fatalf("sent event of the delayed message %+v", s)
	}
	if fe := events[1]; fe.At != start+60_000 || fe.Index != r.idx {
		t.Fatalf("fired event %+v", fe)
	}
	// A message of an Append naming no sender is told from itself.
	r.send("s", nil)
	lines, events = timelineOf(t, r.f, fmt.Sprint("m", r.sent-1))
	wantLines(t, "timeline of a node's message", lines, []string{"sent"})
	if events[0].App != "" || events[0].Addr != "" || events[0].Index != r.idx {
		t.Fatalf("sent event %+v", events[0])
	}
}

// At most max events are returned, and more says there are others.
func TestTimelineBounded(t *testing.T) {
	r := newGroupRig(t).v2()
	r.sendN("s", 1)
	for i := range 5 {
		r.pullN("g", fmt.Sprint("c", i), 1)
		resultAs[*ReclaimResult](t, r.apply(&Reclaim{Now: r.now, Subject: "s", ConsumerGroup: "g", Consumer: fmt.Sprint("c", i)}))
	}
	found, err := r.f.FindMessage("m0", 0, 0)
	if err != nil || len(found) != 1 {
		t.Fatal(found, err)
	}
	all, more, err := r.f.Timeline(found[0], 0)
	if err != nil || more || len(all) != 11 {
		t.Fatalf("whole timeline: %d events, more %v, %v", len(all), more, err)
	}
	some, more, err := r.f.Timeline(found[0], 4)
	if err != nil || !more || !slices.Equal(some, all[:4]) {
		t.Fatalf("Timeline(4) = %+v, more %v, %v", some, more, err)
	}
	if _, more, _ := r.f.Timeline(found[0], 11); more {
		t.Fatal("more at exactly the whole timeline")
	}
}

// Replicas write the same timeline bytes; a restart (replay from the
// checkpoint), a snapshot restored elsewhere and a rebuilt index all give
// the same timeline.
func TestTimelineIdenticalAndDurable(t *testing.T) {
	a, b := newGroupRig(t).v2(), newGroupRig(t).v2()
	timelineWorkload(t, a)
	timelineWorkload(t, b)
	want, _ := timelineOf(t, a.f, "m")
	wantSameFiles(t, a.f.cfg.Dir, b.f.cfg.Dir)
	if a.f.store.timeline.End() == 0 {
		t.Fatal("no timeline written")
	}

	// Snapshot half way, so that a restart replays the rest.
	cfg := b.f.cfg
	takeSnapshot(t, b.f)
	b.f.Close()
	f := unitOpen(t, cfg)
	got, _ := timelineOf(t, f, "m")
	wantLines(t, "after a restart", got, want)
	f.Close()

	// Without its index the timeline is rebuilt from the log.
	if err := os.RemoveAll(filepath.Join(cfg.Dir, dataDir, tlIndexDir)); err != nil {
		t.Fatal(err)
	}
	f = unitOpen(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for !f.store.tlIndex.Ready() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got, _ = timelineOf(t, f, "m")
	wantLines(t, "after rebuilding the index", got, want)
}

// A timeline's records go with the messages they tell of, and only then:
// retention removes the timeline's segments whose events all came before
// the first retained message, and a retained message keeps its whole
// timeline.
func TestTimelineRetention(t *testing.T) {
	r := newGroupRig(t, func(c *Config) {
		c.SegmentSize, c.IndexSegmentSize = 1<<20, 64<<10
		c.Retention = logs.Retention{MaxBytes: 2 << 20}
	}).v2()
	// Long names fill the timeline's segments about as fast as 16 KiB
	// messages fill the message log's.
	g, c := strings.Repeat("g", 200), strings.Repeat("c", 200)
	for i := range 400 {
		r.now += 1000
		appendAt(t, r.f, r.next(), r.now, unitMsg(fmt.Sprint("m", i), "s", 16<<10))
		r.pullN(g, c, 1)
		r.ack(g, c, message.AckRange{First: int64(i), Last: int64(i)})
	}
	ml, tl := r.f.store.messages.Log(), r.f.store.timeline
	if ml.Start() == 0 || tl.Start() == 0 {
		t.Fatalf("retention removed nothing: message log from %d, timeline from %d", ml.Start(), tl.Start())
	}
	first := must(r.f.store.messages.ReadAt(ml.Start()))
	rec, err := decodeTimelineRecord(must(tl.Read(tl.Start())))
	if err != nil {
		t.Fatal(err)
	}
	// The first record kept may be older (it shares a segment with later
	// ones) but the segment after it starts at or after the first message.
	if segs := tl.Segments(); len(segs) > 1 {
		next, err := decodeTimelineRecord(must(tl.Read(segs[1].Base)))
		if err != nil || next.at < first.AppendedAt {
			t.Fatalf("timeline keeps a removable segment: its successor starts at %d, before the first message at %d (%v)", next.at, first.AppendedAt, err)
		}
	}
	if rec.at > first.AppendedAt {
		t.Fatalf("timeline starts at %d, after the first retained message (%d): its records went first", rec.at, first.AppendedAt)
	}
	lines, _ := timelineOf(t, r.f, first.ID)
	wantLines(t, "the oldest retained message", lines, []string{"sent", "handed-out " + g + "/" + c + " #1", "acked " + g + "/" + c + " #1"})
}

// A damaged record is refused, never read as events.
func TestDecodeTimelineRecordRejects(t *testing.T) {
	runs := func(counts ...uint64) []byte {
		b := binenc.AppendUint64([]byte{recConsumer, byte(EventAcked), 1}, 0)
		b = append(b, 0, 0, 0, 0) // subject, group, consumer, by
		b = binenc.AppendUvarint(b, uint64(len(counts)))
		for _, c := range counts {
			b = binenc.AppendUint64(binenc.AppendUvarint(binenc.AppendUvarint(binenc.AppendUvarint(b, 0), c), 1), 0)
		}
		return b
	}
	if _, err := decodeTimelineRecord(runs(maxRecordSeqs-1, 1)); err != nil {
		t.Fatalf("runs of maxRecordSeqs in all: %v", err)
	}
	for name, b := range map[string][]byte{
		"runs past maxRecordSeqs": runs(maxRecordSeqs, 1),
		"too many runs":           binenc.AppendUvarint(append(binenc.AppendUint64([]byte{recConsumer, byte(EventAcked), 1}, 0), 0, 0, 0, 0), maxTimelineRuns+1),
		"empty":                   nil,
		"unknown type":            {9},
		"truncated":               {recConsumer, byte(EventAcked), 1},
		"zero run":                append(append([]byte{recConsumer, byte(EventAcked), 1}, make([]byte, 8)...), 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		"trailing":                append(append([]byte{recFired, 1}, make([]byte, 8)...), 0, 0),
	} {
		if _, err := decodeTimelineRecord(b); !errors.Is(err, logs.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzDecodeTimelineRecord(f *testing.F) {
	f.Add([]byte{recSent, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{recFired, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{recConsumer, byte(EventAcked), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeTimelineRecord(b)
		if err != nil {
			if !errors.Is(err, logs.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		n := 0
		timelineKeys(b, func(uint64) { n++ })
		if rec.typ != recConsumer && n != 1 {
			t.Fatalf("%d keys of a record of type %d", n, rec.typ)
		}
	})
}

// BenchmarkTimeline: the timeline of one message among 20,000, each
// handed out and acked one at a time by each of 4 groups (the worst case
// for the index: every record of a block of sequences is read to find a
// message's), so 160,000 consumer records.
//
//	go test ./fsm -run '^$' -bench Timeline -count 5
func BenchmarkTimeline(b *testing.B) {
	cfg := DefaultConfig(b.TempDir()) // the segment sizes of a broker group's defaults
	cfg.DedupWindow = 0
	f := unitOpen(b, cfg)
	atV2(f)
	idx, now := uint64(0), int64(1_800_000_000_000)
	apply := func(c encoder) any { idx++; return applyAt(f, idx, c) }
	const n, groups = 20_000, 4
	for i := 0; i < n; i += 1000 {
		var msgs []*message.Message
		for j := i; j < i+1000; j++ {
			msgs = append(msgs, unitMsg(fmt.Sprint("m", j), "s", 16))
		}
		apply(&Append{Now: now, Messages: msgs, Apps: []Sender{{Addr: "127.0.0.1:1"}}, Senders: slices.Repeat([]int{1}, len(msgs))})
	}
	for g := range groups {
		group := fmt.Sprint("g", g)
		for i := range n {
			now++
			apply(&Pull{Now: now, Subject: "s", ConsumerGroup: group, Consumer: "c", Max: 1, Start: StartEarliest})
			apply(&Ack{Now: now, Subject: "s", ConsumerGroup: group, Consumer: "c", Ranges: []message.AckRange{{First: int64(i), Last: int64(i)}}})
		}
	}
	must(0, f.store.flush())
	found, err := f.FindMessage("m12345", 0, 0)
	if err != nil || len(found) != 1 {
		b.Fatal(found, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		events, _, err := f.Timeline(found[0], 0)
		if err != nil || len(events) != 1+2*groups {
			b.Fatalf("%d events, %v", len(events), err)
		}
	}
}

// Records at the limits of every name they hold (a subject, a group and a
// consumer of limits.MaxName, who asked of MaxBy, an address of
// limits.MaxAddr) read back: a record apply writes always decodes, so
// that a rebuilt index holds the keys apply gave it.
func TestTimelineRecordsAtTheirLimits(t *testing.T) {
	r := newGroupRig(t).v2()
	s, g, c := strings.Repeat("s", limits.MaxName), strings.Repeat("g", limits.MaxName), strings.Repeat("c", limits.MaxName)
	resultAs[*AppendResult](t, r.apply(&Append{Now: r.now, Messages: []*message.Message{unitMsg("m", s, 8)},
		Apps: []Sender{{App: strings.Repeat("a", limits.MaxName), MaxDelayed: 1, Addr: strings.Repeat("1", limits.MaxAddr)}}, Senders: []int{1}}))
	resultAs[*ConsumerGroupResult](t, r.apply(&SetConsumerGroup{Now: r.now, Subject: s, ConsumerGroup: g, Set: SetMaxDeliveries,
		Settings: ConsumerGroupSettings{MaxDeliveries: 1}, Start: StartEarliest}))
	resultAs[*PullResult](t, r.apply(&Pull{Now: r.now, Subject: s, ConsumerGroup: g, Consumer: c, Max: 1, Start: StartEarliest}))
	resultAs[*NackResult](t, r.apply(&Nack{Now: r.now, Subject: s, ConsumerGroup: g, Consumer: c, Ranges: []message.AckRange{{First: 0, Last: 0}}}))
	by := strings.Repeat("b", MaxBy)
	resultAs[*DeadLettersResult](t, r.apply(&DeadLetters{Now: r.now, Subject: s, ConsumerGroup: g, Op: DeadResend, All: true, By: by}))
	lines, events := timelineOf(t, r.f, "m")
	want := "handed-out " + g + "/" + c + " #1"
	if len(lines) != 5 || lines[1] != want || events[4].Kind != EventResent || events[4].App != by || events[0].Addr != strings.Repeat("1", limits.MaxAddr) {
		t.Fatalf("timeline at the limits: %q", lines)
	}
	must(0, r.f.store.flush())
	err := r.f.store.timeline.Scan(0, func(off int64, p []byte) error {
		if _, err := decodeTimelineRecord(p); err != nil {
			return fmt.Errorf("record at %d: %w", off, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What an entry may write to the timeline follows what it names: a pull
// its Max, an ack a run per sequence it names, a nack or an expiry two (a
// dead letter's too), each no more than a window; a malformed one nothing.
func TestTimelineWritesBound(t *testing.T) {
	f := unitFSM(t)
	one := []message.AckRange{{First: 4, Last: 4}}
	huge := []message.AckRange{{First: 0, Last: 1 << 40}}
	window := int64(f.windowBound)
	for _, c := range []struct {
		cmd  encoder
		want int64
	}{
		{&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 7, Start: StartEarliest}, 7 * maxRunBytes},
		{&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: limits.MaxPullMessages + 1, Start: StartEarliest}, limits.MaxPullMessages * maxRunBytes},
		{&Ack{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, Ranges: one}, maxRunBytes},
		{&Ack{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: append(one, message.AckRange{First: 9, Last: 10})}, 3 * maxRunBytes},
		{&Ack{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: huge}, window * maxRunBytes},
		{&Nack{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1, RetryAt: 5, Ranges: one}, 2 * maxRunBytes},
		{&Expire{Subject: "s", ConsumerGroup: "g", Consumer: "c", Ranges: huge}, 2 * window * maxRunBytes},
		{&DeadLetters{Subject: "s", ConsumerGroup: "g", Seqs: []int64{1, 2}}, 2 * maxRunBytes},
		{&DeadLetters{Subject: "s", ConsumerGroup: "g", All: true}, int64(maxDeadPerGroup) * maxRunBytes},
	} {
		b := c.cmd.Encode()
		if got := f.timelineWrites(CommandType(b[0]), b); got != c.want {
			t.Errorf("%T %+v: bound %d, want %d", c.cmd, c.cmd, got, c.want)
		}
		if got := f.timelineWrites(CommandType(b[0]), b[:12]); got != 0 {
			t.Errorf("%T cut short: bound %d, want 0", c.cmd, got)
		}
	}
}
