package fsm

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/qmqgo/qmq/internal/message"
)

// benchAppendEntry returns the Raft entry at index appending n messages of
// size-byte bodies with ids unique to index.
func benchAppendEntry(index uint64, now int64, n, size int) *raft.Log {
	body := make([]byte, size)
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{ID: fmt.Sprintf("b%d-%d", index, i), Subject: "bench", CreatedAt: now, Body: body}
	}
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: (&Append{Now: now, Messages: msgs}).Encode()}
}

func benchmarkApplyAppend(b *testing.B, size int) { benchmarkApplyAppendFrom(b, size, 0) }

// benchmarkApplyAppendFrom appends batches of 1,000 from clients
// senders (0: none named, as a node's own appends), each sending its
// share of the batch in one run, as a leader batches their requests.
func benchmarkApplyAppendFrom(b *testing.B, size, clients int) {
	cfg := DefaultConfig(b.TempDir())
	cfg.OnApplied = benchOnApplied
	f := unitOpen(b, cfg)
	atV2(f) // the costs of this release: the timeline, the stored bytes
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer() // encoding is the leader's work, not the FSM's
		e := benchAppendEntry(uint64(i+1), int64(i), 1000, size)
		if clients > 0 {
			cmd := must(Decode(e.Data)).(*Append)
			for c := range clients {
				cmd.Apps = append(cmd.Apps, Sender{App: "bench", MaxDelayed: 1000, Addr: fmt.Sprintf("127.0.0.1:%d", 40000+c)})
			}
			for m := range cmd.Messages {
				cmd.Senders = append(cmd.Senders, 1+m*clients/len(cmd.Messages))
			}
			e.Data = cmd.Encode()
		}
		b.StartTimer()
		r := f.Apply(e).(*AppendResult)
		if r.Messages[999].Status != Appended {
			b.Fatalf("message status %d", r.Messages[999].Status)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkApplyAppend1000: one Append of 1,000 messages of 128 B per op.
func BenchmarkApplyAppend1000(b *testing.B) { benchmarkApplyAppend(b, 128) }

// BenchmarkApplyAppend1000Senders: as BenchmarkApplyAppend1000, the batch
// gathered from 50 clients' requests, each named with its address (the
// timeline's sent record).
//
//	go test ./fsm -run '^$' -bench 'ApplyAppend1000$|ApplyAppend1000Senders' -count 5
func BenchmarkApplyAppend1000Senders(b *testing.B) { benchmarkApplyAppendFrom(b, 128, 50) }

// BenchmarkApplyAppend1000_1KiB: one Append of 1,000 messages of 1 KiB per op.
func BenchmarkApplyAppend1000_1KiB(b *testing.B) { benchmarkApplyAppend(b, 1<<10) }

// benchOnApplied is the Config.OnApplied of BenchmarkApplyAppend1000 and
// BenchmarkPullAck: nil, as an FSM without an observer, but in
// BenchmarkApplyObserved.
var benchOnApplied func(index uint64, cmd CommandType, began time.Time, took time.Duration)

// BenchmarkApplyObserved: BenchmarkApplyAppend1000 and BenchmarkPullAck
// with an observer of each entry's apply (what a node's metrics cost the
// state machine: two clock reads and a call per entry).
//
//	go test ./fsm -run '^$' -bench 'ApplyAppend1000$|PullAck/unbounded|ApplyObserved' -count 6
func BenchmarkApplyObserved(b *testing.B) {
	var entries int
	var took time.Duration
	benchOnApplied = func(_ uint64, _ CommandType, _ time.Time, d time.Duration) { entries, took = entries+1, took+d }
	defer func() { benchOnApplied = nil }()
	b.Run("append1000", func(b *testing.B) { benchmarkApplyAppend(b, 128) })
	b.Run("pullack", func(b *testing.B) { benchmarkPullAck(b, 0) })
	if entries == 0 || took <= 0 {
		b.Fatalf("observed %d entries taking %v", entries, took)
	}
}

// BenchmarkPullAck: per op, a Pull of 100 entries and the Ack of them,
// both applied as Raft entries; "bounded", the pull bounded in bytes (as a
// leader proposes it), reads the entries' sizes.
//
//	go test ./fsm -run '^$' -bench 'PullAck|AppendPull' -count 5
func BenchmarkPullAck(b *testing.B) {
	b.Run("unbounded", func(b *testing.B) { benchmarkPullAck(b, 0) })
	b.Run("bounded", func(b *testing.B) { benchmarkPullAck(b, 8<<20) })
}

func benchmarkPullAck(b *testing.B, maxBytes int64) {
	cfg := DefaultConfig(b.TempDir())
	cfg.DedupWindow = 0 // keep the window (and memory) small across refills
	cfg.OnApplied = benchOnApplied
	f := unitOpen(b, cfg)
	atV2(f) // the costs of this release: the timeline, the stored bytes
	index, available := uint64(0), 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if available < 100 {
			b.StopTimer()
			for range 10 {
				index++
				f.Apply(benchAppendEntry(index, int64(index), 1000, 16))
			}
			available += 10_000
			b.StartTimer()
		}
		index++
		r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand,
			Data: (&Pull{Start: StartEarliest, Now: int64(index), Subject: "bench", ConsumerGroup: "g", Consumer: "c", Max: 100, MaxBytes: maxBytes}).Encode()}).(*PullResult)
		if len(r.Entries) != 100 {
			b.Fatalf("pulled %d entries", len(r.Entries))
		}
		available -= 100
		index++
		ack := &Ack{Now: int64(index), Subject: "bench", ConsumerGroup: "g", Consumer: "c",
			Ranges: []message.AckRange{{First: r.Entries[0].PullSeq, Last: r.Entries[99].PullSeq}}}
		if a := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: ack.Encode()}).(*AckResult); a.AckPos != r.Entries[99].PullSeq+1 {
			b.Fatalf("ack position %d", a.AckPos)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "entries/s")
	reportTimeline(b, f, b.N*100)
}

// BenchmarkAppendPull: per op, one batch of an Append of 100 messages, a
// Pull of them and their Ack, as a group keeping up with its producer
// applies them: the pull reads entries the batch appended and has not yet
// flushed. "bounded" bounds the pull in bytes, which makes it read them.
func BenchmarkAppendPull(b *testing.B) {
	b.Run("unbounded", func(b *testing.B) { benchmarkAppendPull(b, 0) })
	b.Run("bounded", func(b *testing.B) { benchmarkAppendPull(b, 8<<20) })
}

func benchmarkAppendPull(b *testing.B, maxBytes int64) {
	cfg := DefaultConfig(b.TempDir())
	cfg.DedupWindow = 0
	f := unitOpen(b, cfg)
	atV2(f) // the costs of this release: the timeline, the stored bytes
	index := uint64(0)
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand,
		Data: (&Pull{Now: 1, Subject: "bench", ConsumerGroup: "g", Consumer: "c", Max: 1, Start: StartEarliest}).Encode()})
	index = 1
	var next int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		app := benchAppendEntry(index+1, int64(index+1), 100, 128)
		pull := &raft.Log{Index: index + 2, Type: raft.LogCommand,
			Data: (&Pull{Now: int64(index + 2), Subject: "bench", ConsumerGroup: "g", Consumer: "c", Max: 100, MaxBytes: maxBytes}).Encode()}
		ack := &raft.Log{Index: index + 3, Type: raft.LogCommand,
			Data: (&Ack{Now: int64(index + 3), Subject: "bench", ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: next, Last: next + 99}}}).Encode()}
		index += 3
		b.StartTimer()
		out := f.ApplyBatch([]*raft.Log{app, pull, ack})
		if r := out[1].(*PullResult); len(r.Entries) != 100 {
			b.Fatalf("pulled %d entries", len(r.Entries))
		}
		next += 100
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
	reportTimeline(b, f, b.N*100)
}

// reportTimeline reports the timeline's bytes per message handled: its
// records (tl-B/msg) and the index entries of its sealed segments
// (tlidx-B/msg, written in the background).
func reportTimeline(b *testing.B, f *FSM, msgs int) {
	b.StopTimer()
	must(0, f.store.flush())
	b.ReportMetric(float64(f.store.timeline.End())/float64(msgs), "tl-B/msg")
	st := f.store.tlIndex.Stats()
	b.ReportMetric(float64(st.DiskBytes)/float64(msgs), "tlidx-B/msg")
}

// BenchmarkApplyFire1000: per op, one Fire of 1,000 due entries (128 B
// bodies) moving them into the message and consume logs; the Appends that
// scheduled them are outside the timing.
func BenchmarkApplyFire1000(b *testing.B) {
	cfg := DefaultConfig(b.TempDir())
	cfg.DedupWindow = 0
	f := unitOpen(b, cfg)
	atV2(f) // the costs of this release: the timeline, the stored bytes
	const hour = int64(498_898)
	body := make([]byte, 128)
	index := uint64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		now := hour*3_600_000 + int64(i)*2000 // the state's clock never goes back
		msgs := make([]*message.Message, 1000)
		for j := range msgs {
			msgs[j] = &message.Message{ID: fmt.Sprintf("d%d-%d", i, j), Subject: "bench", CreatedAt: now, Body: body, DeliverAt: now + 1000}
		}
		index++
		res := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: (&Append{Now: now, Messages: msgs}).Encode()}).(*AppendResult)
		fire := &Fire{Now: now + 1000, Refs: make([]uint64, 0, 1000)}
		for _, r := range res.Messages {
			fire.Refs = append(fire.Refs, r.Ref)
		}
		index++
		e := &raft.Log{Index: index, Type: raft.LogCommand, Data: fire.Encode()}
		b.StartTimer()
		if r := f.Apply(e).(*FireResult); r.Fired != 1000 {
			b.Fatalf("fired %d, passed %d, first result %+v", r.Fired, r.Passed, res.Messages[0])
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "fires/s")
}

// BenchmarkApplyAppendSpread1000: one Append of 1,000 delayed messages of
// 128 B per op, each due at a random hour of the next two years: every
// message lands in a different hour of the schedule.
func BenchmarkApplyAppendSpread1000(b *testing.B) {
	f := unitOpen(b, DefaultConfig(b.TempDir()))
	atV2(f) // the costs of this release: the timeline, the stored bytes
	const hour = int64(498_898)
	body := make([]byte, 128)
	rng := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		now := hour*3_600_000 + int64(i)
		msgs := make([]*message.Message, 1000)
		for j := range msgs {
			at := now + 3_600_000 + rng.Int64N(17_500*3_600_000)
			msgs[j] = &message.Message{ID: fmt.Sprintf("s%d-%d", i, j), Subject: "bench", CreatedAt: now, Body: body, DeliverAt: at}
		}
		e := &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: (&Append{Now: now, Messages: msgs}).Encode()}
		b.StartTimer()
		if r := f.Apply(e).(*AppendResult); r.Messages[999].Status != Scheduled {
			b.Fatalf("status %d", r.Messages[999].Status)
		}
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSnapshotScheduleHours: per op, one snapshot (checkpoint, then a
// hard link of every segment) of a state machine whose schedule holds one
// message in each of 2,000 hours, none touched since the last snapshot: the
// cost a large schedule adds to every snapshot, on the apply goroutine.
func BenchmarkSnapshotScheduleHours(b *testing.B) {
	const hours = 2000
	f := unitOpen(b, DefaultConfig(b.TempDir()))
	atV2(f) // the costs of this release: the timeline, the stored bytes
	now := int64(498_898) * 3_600_000
	msgs := make([]*message.Message, hours)
	for i := range msgs {
		msgs[i] = &message.Message{ID: fmt.Sprint("h", i), Subject: "bench", CreatedAt: now, Body: make([]byte, 128),
			DeliverAt: now + int64(i+1)*3_600_000}
	}
	f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: (&Append{Now: now, Messages: msgs}).Encode()})
	snap, err := f.Snapshot() // lists every hour once
	if err != nil {
		b.Fatal(err)
	}
	snap.Release()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		snap.Release()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/hours, "ns/hour")
}
