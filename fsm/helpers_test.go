package fsm

// Helpers for the unit tests, fuzz tests and benchmarks of this package.
// Names carry a "unit" prefix (or are methods) so that they do not collide
// with the cluster tests' helpers in the same package.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/logs"
)

// unitConfig returns a configuration with the smallest segments Validate
// allows, so that tests roll segments without writing much.
func unitConfig(dir string) Config {
	cfg := DefaultConfig(dir)
	cfg.SegmentSize = 1 << 20
	cfg.IndexSegmentSize = 64 << 10
	return cfg
}

// unitOpen opens an FSM on cfg and closes it when the test ends. Unit
// tests set the values apply goes by through Config: a state whose group
// has set no configuration yet applies by the node's own (ConfigNode,
// unchecked against each other).
func unitOpen(tb testing.TB, cfg Config) *FSM {
	tb.Helper()
	f, err := Open(cfg)
	if err != nil {
		tb.Fatalf("Open(%s): %v", cfg.Dir, err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

// unitFSM opens an FSM in a fresh directory; mutate (if any) adjusts its
// configuration first.
func unitFSM(tb testing.TB, mutate ...func(*Config)) *FSM {
	tb.Helper()
	cfg := unitConfig(tb.TempDir())
	for _, m := range mutate {
		m(&cfg)
	}
	return unitOpen(tb, cfg)
}

// atV2 raises f's group to version 2 as a SetVersion applied before its
// first entry would (no entry: the indexes a benchmark applies at stay
// its own), for benchmarks of what apply costs at this release's newest
// version (the timeline, the stored bytes).
func atV2(f *FSM) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	f.applySetVersion(&SetVersion{Version: version.V2})
}

// encoder is every command.
type encoder interface{ Encode() []byte }

// unitEntry returns the Raft entry carrying cmd at index.
func unitEntry(index uint64, cmd encoder) *raft.Log {
	return &raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: cmd.Encode()}
}

// applyAt applies cmd as the Raft entry at index.
func applyAt(f *FSM, index uint64, cmd encoder) any {
	return f.Apply(unitEntry(index, cmd))
}

// unitMsg returns a message of subject with a body of size bytes.
func unitMsg(id, subject string, size int) *message.Message {
	var body []byte // nil when empty, as decoded
	if size > 0 {
		body = make([]byte, size)
	}
	for i := range body {
		body[i] = byte(i*7 + len(id))
	}
	return &message.Message{ID: id, Subject: subject, CreatedAt: 42, Body: body}
}

// resultAs asserts that an Apply response has type T.
func resultAs[T any](tb testing.TB, r any) T {
	tb.Helper()
	v, ok := r.(T)
	if !ok {
		tb.Fatalf("response %T (%v), want %T", r, r, *new(T))
	}
	return v
}

func appendAt(tb testing.TB, f *FSM, index uint64, now int64, msgs ...*message.Message) *AppendResult {
	tb.Helper()
	return resultAs[*AppendResult](tb, applyAt(f, index, &Append{Now: now, Messages: msgs}))
}

func pullAt(tb testing.TB, f *FSM, index uint64, now int64, subject, group, consumer string, n int) *PullResult {
	tb.Helper()
	return resultAs[*PullResult](tb, applyAt(f, index, &Pull{Start: StartEarliest, Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Max: n}))
}

func ackAt(tb testing.TB, f *FSM, index uint64, now int64, subject, group, consumer string, ranges ...message.AckRange) *AckResult {
	tb.Helper()
	return resultAs[*AckResult](tb, applyAt(f, index, &Ack{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Ranges: ranges}))
}

func reclaimAt(tb testing.TB, f *FSM, index uint64, now int64, subject, group, consumer string) *ReclaimResult {
	tb.Helper()
	return resultAs[*ReclaimResult](tb, applyAt(f, index, &Reclaim{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer}))
}

// wantInvalid asserts that a response is an error wrapping ErrInvalid.
func wantInvalid(tb testing.TB, r any) {
	tb.Helper()
	err, ok := r.(error)
	if !ok || !errors.Is(err, ErrInvalid) {
		tb.Fatalf("response %T (%v), want an error wrapping ErrInvalid", r, r)
	}
}

// consumeSeqs returns the consume-log sequences a pull handed out.
func consumeSeqs(r *PullResult) []int64 {
	out := []int64{}
	for _, e := range r.Entries {
		out = append(out, e.ConsumeSeq)
	}
	return out
}

// seqRange returns from, from+1, …, to-1.
func seqRange(from, to int64) []int64 {
	out := []int64{}
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// stateBytes encodes everything the FSM holds besides its logs and its
// applied index, together with the log ends: two FSMs (or one FSM at two
// times) with equal stateBytes hold the same state.
func stateBytes(f *FSM) []byte {
	applied := f.st.applied
	f.st.applied = 0
	defer func() { f.st.applied = applied }()
	// In the newest version, which holds all of it: the bytes stored per
	// subject too, which a group below version 2 does not checkpoint.
	c := f.currentCheckpoint()
	c.ends.consumeBytes = f.store.allStoredBytes()
	return c.encodeVersion(checkpointVersion)
}

// wantStateUnchanged asserts that the FSM's state equals before.
func wantStateUnchanged(tb testing.TB, f *FSM, before []byte) {
	tb.Helper()
	if after := stateBytes(f); !bytes.Equal(before, after) {
		tb.Fatalf("state changed:\nbefore %x\nafter  %x", before, after)
	}
}

// dataFiles reads every file of the FSM directory dir's data (the logs),
// except the checkpoint and the key indexes (derived from the message log
// and the timeline, and written in the background), by slash-separated relative path.
func dataFiles(tb testing.TB, dir string) map[string][]byte {
	tb.Helper()
	root := filepath.Join(dir, dataDir)
	files := map[string][]byte{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == filepath.Join(root, indexDir) || path == filepath.Join(root, tlIndexDir) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == checkpointFile {
			return nil
		}
		b, err := os.ReadFile(path)
		files[rel] = b
		return err
	})
	if err != nil {
		tb.Fatalf("reading %s: %v", root, err)
	}
	return files
}

// wantSameFiles asserts that two FSM directories hold byte-identical logs.
func wantSameFiles(tb testing.TB, dirA, dirB string) {
	tb.Helper()
	a, b := dataFiles(tb, dirA), dataFiles(tb, dirB)
	if len(a) == 0 {
		tb.Fatalf("%s holds no data files", dirA)
	}
	var diffs []string
	for _, name := range sortedKeys(a) {
		other, ok := b[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: only in the first", name))
		case !bytes.Equal(a[name], other):
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes vs %d bytes, contents differ", name, len(a[name]), len(other)))
		}
	}
	for _, name := range sortedKeys(b) {
		if _, ok := a[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only in the second", name))
		}
	}
	if len(diffs) > 0 {
		tb.Fatalf("data files of %s and %s differ:\n%s", dirA, dirB, strings.Join(diffs, "\n"))
	}
}

// describe renders an Apply response for comparing two runs (errors by
// message, pointers by value).
func describe(r any) string {
	switch v := r.(type) {
	case nil:
		return "nil"
	case error:
		return "error: " + v.Error()
	case *AppendResult:
		var b strings.Builder
		for _, m := range v.Messages {
			fmt.Fprintf(&b, "{%d %d %d %v}", m.Status, m.Offset, m.Seq, m.Err)
		}
		return "append " + b.String()
	case *PullResult:
		return fmt.Sprintf("pull %v", v.Entries)
	case *AckResult:
		return fmt.Sprintf("ack %+v", *v)
	case *ReclaimResult:
		return fmt.Sprintf("reclaim %+v", *v)
	}
	return fmt.Sprintf("%T %v", r, r)
}

// applyAll applies entries one at a time and returns the described
// responses.
func applyAll(f *FSM, entries []*raft.Log) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = describe(f.Apply(e))
	}
	return out
}

// unitWorkload returns n Raft entries (indices 1..n) of a deterministic mix
// of every command on two subjects, two groups and three consumers,
// including duplicates, a rejected message, refused acks, reclaims and
// configuration entries, delayed messages (some due an hour later) and
// Fires of them (including repeated, early and bogus references). The
// leader time moves forward by 1 s per entry, far less than the default
// dedup window.
func unitWorkload(n int, bodySize int) []*raft.Log {
	subjects := []string{"orders", "payments.eu"}
	groups := []string{"billing", "audit"}
	consumers := []string{"c1", "c2", "c3"}
	var out []*raft.Log
	hourEnds := map[int64]int64{} // where each hour's records end, as the FSM will write them
	var scheduled []delaywheel.Entry
	for i := 1; i <= n; i++ {
		now := int64(1_000_000 + i*1000)
		idx := uint64(i)
		subject := subjects[i%2]
		group := groups[(i/2)%2]
		consumer := consumers[(i/3)%3]
		var cmd encoder
		switch i % 9 {
		case 0:
			out = append(out, &raft.Log{Index: idx, Term: 1, Type: raft.LogConfiguration, Data: []byte{byte(i)}})
			continue
		case 1, 4, 6:
			msgs := []*message.Message{}
			for j := range 3 {
				msgs = append(msgs, unitMsg(fmt.Sprintf("m-%d-%d", i, j), subject, bodySize+j))
			}
			msgs[2].Tags = []string{"t1", "t2"}
			msgs[2].Properties = []message.Property{{Key: "k", Value: fmt.Sprint(i)}}
			if i > 10 {
				msgs = append(msgs, unitMsg(fmt.Sprintf("m-%d-0", i-9), subjects[(i-9)%2], 5)) // a duplicate
			}
			if i%4 == 0 {
				msgs = append(msgs, unitMsg("bad", "no/slash", 1)) // rejected
			}
			d := unitMsg(fmt.Sprintf("d-%d", i), subject, bodySize)
			d.DeliverAt = now + 2500
			if i%4 == 1 {
				d.DeliverAt += delaywheel.HourMillis // the next hour
			}
			hour := delaywheel.Hour(d.DeliverAt)
			scheduled = append(scheduled, delaywheel.Entry{At: d.DeliverAt, Ref: delaywheel.MakeRef(hour, hourEnds[hour])})
			hourEnds[hour] += delaywheel.RecordSize(d)
			msgs = append(msgs, d)
			if i > 10 {
				again := unitMsg(fmt.Sprintf("d-%d", i-9), subject, bodySize) // a duplicate of a delayed message
				again.DeliverAt = now + 1000
				msgs = append(msgs, again)
			}
			cmd = &Append{Now: now, Messages: msgs}
		case 5:
			if i%18 != 5 {
				cmd = &Pull{Start: StartEarliest, Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Max: 2 + i%3}
				break
			}
			// Every entry due, those fired before included, one not due yet
			// and a reference that names no record.
			fire := &Fire{Now: now, Refs: []uint64{delaywheel.MakeRef(delaywheel.Hour(now), 3)}}
			for _, e := range scheduled {
				if e.At <= now || len(fire.Refs) < 3 {
					fire.Refs = append(fire.Refs, e.Ref)
				}
			}
			cmd = fire
		case 2:
			cmd = &Pull{Start: StartEarliest, Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer, Max: 2 + i%3}
		case 3, 7:
			// Acks of sequences 0..i/10: refused while the consumer has not
			// pulled that far, otherwise applied (repeatedly: harmless).
			cmd = &Ack{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer,
				Ranges: []message.AckRange{{First: int64(i / 10), Last: int64(i / 10)}, {First: 0, Last: 0}}}
		case 8:
			if i%16 == 8 {
				cmd = &Reclaim{Now: now, Subject: subject, ConsumerGroup: group, Consumer: consumer}
			} else {
				cmd = &Pull{Start: StartEarliest, Now: now - 5000, Subject: subject, ConsumerGroup: group, Consumer: consumers[(i+1)%3], Max: 4}
			}
		}
		out = append(out, unitEntry(idx, cmd))
	}
	return out
}

// unitSink is a raft.SnapshotSink in memory.
type unitSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *unitSink) ID() string    { return "unit" }
func (s *unitSink) Close() error  { s.closed = true; return nil }
func (s *unitSink) Cancel() error { s.canceled = true; return nil }

// snapshotStream takes a snapshot of f and returns its whole stream.
func snapshotStream(tb testing.TB, f *FSM) []byte {
	tb.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	var sink unitSink
	if err := snap.Persist(&sink); err != nil {
		tb.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.canceled {
		tb.Fatalf("Persist left the sink closed=%v canceled=%v", sink.closed, sink.canceled)
	}
	return sink.Bytes()
}

// readStream reads a whole snapshot stream as Restore does, handing each
// file's bytes to create's writer.
func readStream(r io.Reader, create func(rel string) (io.WriteCloser, error)) (*snapshot.Manifest, error) {
	m, err := snapshot.ReadHead(r, checkSnapPath)
	if err != nil {
		return nil, err
	}
	if err := snapshot.ReadFiles(r, m, create); err != nil {
		return nil, err
	}
	return m, nil
}

// checkStream asserts that stream is a complete snapshot whose checksums
// all match, and returns its manifest.
func checkStream(tb testing.TB, stream []byte) *snapshot.Manifest {
	tb.Helper()
	m, err := readStream(bytes.NewReader(stream), func(string) (io.WriteCloser, error) { return nopWriteCloser{io.Discard}, nil })
	if err != nil {
		tb.Fatalf("snapshot stream of %d bytes: %v", len(stream), err)
	}
	if m.StreamSize() != int64(len(stream)) {
		tb.Fatalf("stream of %d bytes, its manifest says %d", len(stream), m.StreamSize())
	}
	return m
}

// messagesOf reads every message of subject from sequence from up to the
// consume log's end, rendered for comparison.
func messagesOf(tb testing.TB, f *FSM, subject string) []string {
	tb.Helper()
	cl := f.store.consumeLog(subject)
	if cl == nil {
		return nil
	}
	var out []string
	for seq := cl.StartSeq(); seq < cl.EndSeq(); seq++ {
		m, err := f.Message(subject, seq)
		if err != nil {
			// Paths in the message differ between FSMs: keep the kind.
			kind := "other"
			for _, k := range []error{logs.ErrRetained, logs.ErrBeyondEnd, logs.ErrCorrupt, logs.ErrClosed} {
				if errors.Is(err, k) {
					kind = k.Error()
				}
			}
			out = append(out, fmt.Sprintf("%d: error %s", seq, kind))
			continue
		}
		out = append(out, fmt.Sprintf("%d: %d %s %s %d %v %v %x", seq, m.Index, m.ID, m.Subject, m.AppendedAt, m.Tags, m.Properties, m.Body))
	}
	return out
}

// wantSameReads asserts that two FSMs return the same messages for every
// subject either knows.
func wantSameReads(tb testing.TB, a, b *FSM) {
	tb.Helper()
	subjects := append(a.store.subjects(), b.store.subjects()...)
	slices.Sort(subjects)
	for _, s := range slices.Compact(subjects) {
		ma, mb := messagesOf(tb, a, s), messagesOf(tb, b, s)
		if !slices.Equal(ma, mb) {
			tb.Fatalf("subject %s reads differ:\n%v\n%v", s, ma, mb)
		}
	}
}
