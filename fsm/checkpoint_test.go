package fsm

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// takeSnapshot snapshots f (writing its checkpoint) and persists the
// snapshot into raft's in-memory store, as Raft would.
func takeSnapshot(tb testing.TB, f *FSM) {
	tb.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		tb.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	sink, err := raft.NewInmemSnapshotStore().Create(1, f.Applied(), 1, raft.Configuration{}, 1, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		tb.Fatalf("Persist: %v", err)
	}
}

func TestRestartFromCheckpoint(t *testing.T) {
	// 20 KB bodies: the message log rolls a few times, before and after the
	// snapshot.
	entries := unitWorkload(150, 20_000)
	ref := unitFSM(t)
	want := applyAll(ref, entries)

	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	first := applyAll(f, entries[:80])
	takeSnapshot(t, f)
	atSnapshot := f.Ends()
	first = append(first, applyAll(f, entries[80:130])...)
	if !slices.Equal(first, want[:130]) {
		t.Fatal("the FSM under test and the reference answered differently")
	}
	if f.Ends().Messages == atSnapshot.Messages || len(f.store.messages.Log().Segments()) < 2 {
		t.Fatal("the workload does not write past the snapshot or roll the message log")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	g := unitOpen(t, cfg)
	if g.Applied() != 80 {
		t.Fatalf("reopened at index %d, want the snapshot's 80", g.Applied())
	}
	if ends := g.Ends(); !reflect.DeepEqual(ends, atSnapshot) {
		t.Fatalf("reopened with log ends %+v, want the snapshot's %+v", ends, atSnapshot)
	}
	// Raft replays from its snapshot; anything older is skipped.
	for i, r := range applyAll(g, entries[70:80]) {
		if r != "nil" {
			t.Fatalf("replayed entry %d below the checkpoint: %s", 71+i, r)
		}
	}
	replay := applyAll(g, entries[80:])
	if !slices.Equal(replay[:50], first[80:130]) {
		t.Fatalf("replay answered differently from the first time:\n%v\n%v", replay[:50], first[80:130])
	}
	if !slices.Equal(replay, want[80:]) {
		t.Fatal("replay answered differently from the reference")
	}
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
	if !bytes.Equal(stateBytes(ref), stateBytes(g)) || ref.Applied() != g.Applied() {
		t.Fatal("state differs from the reference")
	}
	wantSameReads(t, ref, g)

	// The dedup window survived: ids from before and after the checkpoint
	// are still recognized.
	for _, fsm := range []*FSM{ref, g} {
		res := appendAt(t, fsm, 151, 1_200_000, unitMsg("m-1-0", "x", 1), unitMsg("m-145-2", "x", 1), unitMsg("new", "x", 1))
		if s := []MessageStatus{res.Messages[0].Status, res.Messages[1].Status, res.Messages[2].Status}; !slices.Equal(s, []MessageStatus{Duplicate, Duplicate, Appended}) {
			t.Fatalf("statuses after restart %v, want duplicate, duplicate, appended", s)
		}
	}
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
}

func TestRestartWithoutCheckpoint(t *testing.T) {
	entries := unitWorkload(60, 30_000)
	ref := unitFSM(t)
	want := applyAll(ref, entries)

	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	applyAll(f, entries)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	if g.Applied() != 0 {
		t.Fatalf("reopened at index %d, want 0", g.Applied())
	}
	if e := g.Ends(); e.Messages != 0 || e.Pulls != 0 || len(e.Consume) != 0 {
		t.Fatalf("reopened with log ends %+v, want everything empty", e)
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, dataDir, consumeDir, "orders")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("consume log unknown to the (empty) checkpoint survived: %v", err)
	}
	if got := applyAll(g, entries); !slices.Equal(got, want) {
		t.Fatal("replay answered differently from the reference")
	}
	wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
	wantSameReads(t, ref, g)
}

func TestDedupWindowSurvivesRestart(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, 1000, unitMsg("old", "s", 1))
	appendAt(t, f, 2, 500_000, unitMsg("a", "s", 1), unitMsg("b", "s", 1))
	takeSnapshot(t, f)
	appendAt(t, f, 3, 500_001, unitMsg("after", "s", 1))
	f.Close()

	g := unitOpen(t, cfg)
	window := cfg.DedupWindow.Milliseconds()
	// At 1000+window+1 "old" has left the window; a and b have not.
	res := appendAt(t, g, 3, 1000+window+1, unitMsg("a", "s", 1), unitMsg("old", "s", 1), unitMsg("b", "t", 1), unitMsg("after", "s", 1))
	want := []MessageStatus{Duplicate, Appended, Duplicate, Appended}
	for i, r := range res.Messages {
		if r.Status != want[i] {
			t.Fatalf("message %d: %+v, want status %d", i, r, want[i])
		}
	}
	// Just past the window for a and b.
	res = appendAt(t, g, 4, 500_000+window+1, unitMsg("a", "s", 1), unitMsg("after", "s", 1))
	if res.Messages[0].Status != Appended || res.Messages[1].Status != Duplicate {
		t.Fatalf("past the window: %+v", res.Messages)
	}
}

func TestOpenFinishesInterruptedRestore(t *testing.T) {
	src := unitFSM(t)
	applyAll(src, unitWorkload(30, 100))
	takeSnapshot(t, src)

	// A crash after the restore directory was complete, before the swap.
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, 1, unitMsg("stale", "stale", 1))
	f.Close()
	copyTree(t, filepath.Join(src.cfg.Dir, dataDir), filepath.Join(cfg.Dir, restoreDir))
	os.MkdirAll(filepath.Join(cfg.Dir, oldDir), 0o755)
	g := unitOpen(t, cfg)
	if g.Applied() != src.Applied() {
		t.Fatalf("applied %d after finishing the restore, want %d", g.Applied(), src.Applied())
	}
	wantSameFiles(t, src.cfg.Dir, cfg.Dir)
	for _, d := range []string{restoreDir, oldDir} {
		if _, err := os.Stat(filepath.Join(cfg.Dir, d)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left behind: %v", d, err)
		}
	}

	// An incomplete restore directory (no checkpoint) is discarded.
	g.Close()
	copyTree(t, filepath.Join(src.cfg.Dir, dataDir, messagesDir), filepath.Join(cfg.Dir, restoreDir, messagesDir))
	h := unitOpen(t, cfg)
	if h.Applied() != src.Applied() {
		t.Fatalf("applied %d, want %d", h.Applied(), src.Applied())
	}
	if _, err := os.Stat(filepath.Join(cfg.Dir, restoreDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("incomplete restore left behind: %v", err)
	}
}

func copyTree(tb testing.TB, from, to string) {
	tb.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if filepath.Base(filepath.Dir(path)) == indexDir {
			return nil // the message index, written in the background: rebuilt on open
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// busyFSM returns an FSM whose state uses every part of the checkpoint:
// two subjects, groups with redelivery queues, consumers with windows
// holding acked and unacked entries, members and a dedup window.
func busyFSM(tb testing.TB) *FSM {
	f := unitFSM(tb)
	appendAt(tb, f, 1, 1000, unitMsg("a", "s", 10), unitMsg("b", "s", 10), unitMsg("c", "t", 10), unitMsg("d", "s", 10))
	pullAt(tb, f, 2, 1000, "s", "g1", "c1", 3)
	pullAt(tb, f, 3, 1000, "s", "g2", "c1", 2)
	pullAt(tb, f, 4, 1000, "t", "g1", "c2", 1)
	ackAt(tb, f, 5, 1000, "s", "g1", "c1", message.AckRange{First: 1, Last: 1})
	ackAt(tb, f, 6, 1000, "s", "g2", "c1", message.AckRange{First: 0, Last: 0})
	reclaimAt(tb, f, 7, 2000, "t", "g1", "c2")
	pullAt(tb, f, 8, 2000, "s", "g1", "c3", 1)
	pullAt(tb, f, 9, 2000, "empty", "g", "c", 1)
	applyAt(f, 10, &SetMember{Now: 2000, ID: "node2", ClientAddr: "10.0.0.2:7000"})
	applyAt(f, 11, &SetMember{Now: 2000, ID: "node1", ClientAddr: "10.0.0.1:7000"})
	return f
}

func TestCheckpointRoundTrip(t *testing.T) {
	f := busyFSM(t)
	cp := f.currentCheckpoint()
	b := cp.encode()
	got, err := decodeCheckpoint(b)
	if err != nil {
		t.Fatal(err)
	}
	f.adoptNodeConfig(got) // a group not configured yet: the values are the node's, not in the encoding
	if !reflect.DeepEqual(got.st, f.st) {
		t.Fatalf("decoded state\n%+v\nwant\n%+v", got.st, f.st)
	}
	if !reflect.DeepEqual(got.ends, cp.ends) || got.dedupFrom != cp.dedupFrom {
		t.Fatalf("decoded ends %+v from %d, want %+v from %d", got.ends, got.dedupFrom, cp.ends, cp.dedupFrom)
	}
	if !bytes.Equal(got.encode(), b) {
		t.Fatal("re-encoding differs")
	}
	// The file Snapshot writes is this encoding.
	takeSnapshot(t, f)
	onDisk, err := os.ReadFile(filepath.Join(f.cfg.Dir, dataDir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, b) {
		t.Fatal("the checkpoint file differs from the encoding of the state")
	}
	// And reopening gives the same state back.
	before := stateBytes(f)
	f.Close()
	g := unitOpen(t, f.cfg)
	if !bytes.Equal(stateBytes(g), before) || g.Applied() != 11 || g.MemberAddr("node1") != "10.0.0.1:7000" {
		t.Fatal("reopened state differs")
	}
}

// seal appends the checkpoint checksum to body.
func seal(body []byte) []byte {
	return binary.LittleEndian.AppendUint32(body, crc32.Checksum(body, castagnoli))
}

// rawCheckpoint builds a checkpoint body field by field, so that tests can
// write what the encoder never would.
type rawCheckpoint struct {
	msgEnd, pullEnd, dedupFrom int64
	subjects                   []string // consume logs, each ending at 0
	groups                     [][2]string
	consumers                  []rawConsumer
	members                    [][2]string
	version                    byte // default checkpointVersion
	journalEnd                 uint64
	hours                      [][4]uint64 // hour, pending, records end, dispatched end
	delayed                    []rawDelayed
	nextEpoch                  uint64       // version 3; default: one past the consumers
	group                      *group       // version 4: every group's settings, counts and dead letters
	nextGen, retries           uint64       // version 4
	removing                   byte         // version 5
	identity                   string       // version 5
	config                     *groupConfig // version 5; default initialGroupConfig
	apps                       []byte       // version 5: the applications' lists; default none
	timelineEnd                uint64       // version 6; default 64
	timelineZero               bool         // version 6: a timeline end of 0
	storedBytes                []uint64     // version 7: each subject's; default 100 each
	activeVersion              uint64       // version 8; default 2
	activeZero                 bool         // version 8: an active version of 0
}

type rawDelayed struct {
	subject string
	n       uint64
}

type rawConsumer struct {
	s, g, c      string
	ackPos, next uint64
	window       [][3]uint64 // seq, pos, acked byte
	epoch        uint64      // version 3; default: its place in the list plus one
}

func (r rawCheckpoint) body() []byte {
	version := cmp.Or(r.version, checkpointVersion)
	b := []byte{version}
	for _, v := range []int64{1, 1000, r.msgEnd, r.pullEnd, r.dedupFrom} {
		b = binenc.AppendUint64(b, uint64(v))
	}
	b = binenc.AppendUvarint(b, uint64(len(r.subjects)))
	for _, s := range r.subjects {
		b = binenc.AppendUint64(binenc.AppendString(b, s), 0)
	}
	b = binenc.AppendUvarint(b, uint64(len(r.groups)))
	for _, g := range r.groups {
		b = binenc.AppendString(binenc.AppendString(b, g[0]), g[1])
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, 7), 0) // cursor, no redeliveries
		if version >= 4 {
			b = appendGroupV4(b, cmp.Or(r.group, &group{settings: DefaultConsumerGroupSettings()}))
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(r.consumers)))
	for i, c := range r.consumers {
		if version < 3 {
			b = append(b, 1) // present, not reclaimed
		} else {
			b = binenc.AppendUvarint(b, cmp.Or(c.epoch, uint64(i+1)))
		}
		b = appendNames(b, c.s, c.g, c.c)
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, c.ackPos), c.next)
		b = binenc.AppendUvarint(b, uint64(len(c.window)))
		for _, w := range c.window {
			b = append(binenc.AppendUvarint(binenc.AppendUvarint(b, w[0]), w[1]), byte(w[2]))
			if version >= 4 {
				b = binenc.AppendUvarint(binenc.AppendUvarint(b, 1), 0) // one delivery, no deadline
			}
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(r.members)))
	for _, m := range r.members {
		b = binenc.AppendString(binenc.AppendString(b, m[0]), m[1])
	}
	b = binenc.AppendUint64(b, 0) // retain-from
	if version < 2 {
		return b
	}
	b = binenc.AppendUint64(b, r.journalEnd)
	b = binenc.AppendUvarint(b, uint64(len(r.hours)))
	for _, h := range r.hours {
		for _, v := range h {
			b = binenc.AppendUvarint(b, v)
		}
	}
	b = binenc.AppendUvarint(b, uint64(len(r.delayed)))
	for _, d := range r.delayed {
		b = binenc.AppendUvarint(binenc.AppendString(b, d.subject), d.n)
	}
	if version < 3 {
		return b
	}
	b = binenc.AppendUvarint(b, cmp.Or(r.nextEpoch, uint64(len(r.consumers)+1)))
	if version < 4 {
		return b
	}
	b = binenc.AppendUvarint(binenc.AppendUvarint(b, r.nextGen), r.retries)
	if version < 5 {
		return b
	}
	b = binenc.AppendString(append(b, r.removing), r.identity)
	config := initialGroupConfig()
	if r.config != nil {
		config = *r.config
	}
	if b = append(b, byte(config.source)); config.source != ConfigNode {
		b = binenc.AppendUvarint(b, config.index)
		for _, v := range config.values() {
			b = binenc.AppendUvarint(b, uint64(v))
		}
		b = binenc.AppendUint64(b, uint64(config.dedupFloor))
	}
	if r.apps != nil {
		b = append(b, r.apps...)
	} else {
		b = append(b, 0, 0, 0, 0) // no group, consumer or delayed message of an application, no hour's count
	}
	if version < 6 {
		return b
	}
	if r.timelineZero {
		b = binenc.AppendUint64(b, 0)
	} else {
		b = binenc.AppendUint64(b, cmp.Or(r.timelineEnd, 64))
	}
	if version < 7 {
		return b
	}
	for i := range r.subjects {
		n := uint64(100)
		if r.storedBytes != nil {
			n = r.storedBytes[i]
		}
		b = binenc.AppendUvarint(b, n)
	}
	if version < 8 {
		return b
	}
	if r.activeZero {
		return binenc.AppendUvarint(b, 0)
	}
	return binenc.AppendUvarint(b, cmp.Or(r.activeVersion, 2))
}

func TestDecodeCheckpointRejects(t *testing.T) {
	valid := rawCheckpoint{
		msgEnd: 100, dedupFrom: -1,
		subjects:   []string{"a", "b"},
		groups:     [][2]string{{"a", "g"}, {"b", "g"}},
		consumers:  []rawConsumer{{"a", "g", "c", 1, 3, [][3]uint64{{5, 0, 1}, {6, 1, 0}}, 0}, {"b", "g", "c", 0, 0, nil, 0}},
		members:    [][2]string{{"n1", "x"}, {"n2", "y"}},
		hours:      [][4]uint64{{493_000, 2, 300, 0}, {493_001, 1, 100, 16}},
		journalEnd: 96,
		delayed:    []rawDelayed{{"a", 1}, {"b", 2}},
	}
	if _, err := decodeCheckpoint(seal(valid.body())); err != nil {
		t.Fatalf("the valid raw checkpoint: %v", err)
	}
	// A checkpoint written before delayed messages (version 1) still opens,
	// and one written before epochs (version 2): consumer i is epoch i+1.
	v1 := valid
	v1.version, v1.hours, v1.delayed = 1, nil, nil
	if c, err := decodeCheckpoint(seal(v1.body())); err != nil || len(c.st.hours) != 0 {
		t.Fatalf("a version 1 checkpoint: %v", err)
	}
	// Version 3, before group settings: groups open with the defaults.
	v3 := valid
	v3.version = 3
	if c, err := decodeCheckpoint(seal(v3.body())); err != nil || c.st.groups[groupKey{"a", "g"}].settings != DefaultConsumerGroupSettings() {
		t.Fatalf("a version 3 checkpoint: %v", err)
	}
	// Version 4, before retention's removing mark and the broker group
	// configuration: not removing, the node's own values, which it is
	// written with again.
	v4 := valid
	v4.version = 4
	if c, err := decodeCheckpoint(seal(v4.body())); err != nil || c.st.removing || c.st.config.source != ConfigNode || !bytes.Equal(c.encode(), seal(v4.body())) {
		t.Fatalf("a version 4 checkpoint: %v", err)
	}
	removing := valid
	removing.removing, removing.identity = 1, "g1/0123456789abcdef0123456789abcdef"
	if c, err := decodeCheckpoint(seal(removing.body())); err != nil || !c.st.removing || c.st.identity != removing.identity {
		t.Fatalf("a checkpoint of retention's removal, with an identity: %v", err)
	}
	configured := valid
	configured.config = &groupConfig{BrokerConfig: BrokerConfig{RetentionAge: 3_600_000, DedupWindow: 60_000, MaxPull: 5, MaxUnacked: 9,
		SegmentSize: 2 << 20, IndexSegmentSize: 128 << 10}, source: ConfigGroup, index: 1, dedupFloor: 900}
	if c, err := decodeCheckpoint(seal(configured.body())); err != nil || c.st.config != *configured.config {
		t.Fatalf("a configured checkpoint: %+v, %v", c.st.config, err)
	}
	// Applications: group a/g, consumer 2 and a delayed message recorded as
	// billing's; a checkpoint recording them is never written as version 4.
	withApps := valid
	withApps.apps = rawApps([][3]string{{"a", "g", "billing"}}, map[uint64]string{2: "billing"}, [][2]any{{"billing", uint64(1)}})
	c := mustDecodeCheckpoint(t, seal(withApps.body()))
	if c.st.groups[groupKey{"a", "g"}].app != "billing" || c.st.consumers[2].app != "billing" || c.st.appDelayed["billing"] != 1 ||
		c.st.appConsumers["billing"] != 1 || c.st.groups[groupKey{"b", "g"}].app != "" || c.st.consumers[1].app != "" {
		t.Fatalf("applications read %+v %v", c.st.appConsumers, c.st.appDelayed)
	}
	counted := valid
	counted.apps = rawHourCounts([]any{493_000, 5, "billing", 2, "ops", 3}, []any{493_001, 1})
	if c := mustDecodeCheckpoint(t, seal(counted.body())); c.st.hours[493_000].delayed != 5 || c.st.hours[493_000].apps["ops"] != 3 ||
		c.st.hours[493_001].delayed != 1 || c.st.hours[493_001].apps != nil {
		t.Fatalf("hours' counts read %+v %+v", c.st.hours[493_000], c.st.hours[493_001])
	}
	if c := mustDecodeCheckpoint(t, seal(v4.body())); c.st.hours[493_000].delayed != 2 || c.st.hours[493_001].delayed != 2 {
		t.Fatalf("a version 4 checkpoint's hours count %d and %d, want pending and dispatched", c.st.hours[493_000].delayed, c.st.hours[493_001].delayed)
	}
	withApps.config = &groupConfig{source: ConfigNode}
	if b := mustDecodeCheckpoint(t, seal(withApps.body())).encode(); b[0] != checkpointVersion {
		t.Fatalf("a checkpoint recording applications encodes as version %d", b[0])
	}
	// Version 6, before the bytes stored per subject: none recorded (Open
	// counts them), and a state holding none is written in it again.
	v6 := valid
	v6.version = 6
	if c, err := decodeCheckpoint(seal(v6.body())); err != nil || c.ends.consumeBytes != nil || !bytes.Equal(c.encode(), seal(v6.body())) {
		t.Fatalf("a version 6 checkpoint: %v", err)
	}
	if c := mustDecodeCheckpoint(t, seal(valid.body())); c.ends.consumeBytes["a"] != 100 || c.ends.consumeBytes["b"] != 100 {
		t.Fatalf("the bytes stored per subject read %v", c.ends.consumeBytes)
	}
	v2 := valid
	v2.version = 2
	if c, err := decodeCheckpoint(seal(v2.body())); err != nil || c.st.nextEpoch != 3 || c.st.consumers[2].key.subject != "b" {
		t.Fatalf("a version 2 checkpoint: %v", err)
	}
	if !bytes.Equal(mustDecodeCheckpoint(t, seal(valid.body())).encodeVersion(checkpointVersion), seal(valid.body())) {
		t.Fatal("the valid raw checkpoint does not re-encode to itself")
	}
	// With an identity, a state is encoded as version 5 (with nothing of
	// version 5 it is encoded as version 4, above, and a version 5 holding
	// nothing of it is refused, below).
	if b := mustDecodeCheckpoint(t, seal(removing.body())).encode(); !bytes.Equal(b, seal(removing.body())) {
		t.Fatalf("a checkpoint with an identity encodes as version %d", b[0])
	}
	mutate := func(m func(*rawCheckpoint)) []byte {
		r := valid
		r.consumers, r.hours = slices.Clone(valid.consumers), slices.Clone(valid.hours)
		m(&r)
		return seal(r.body())
	}
	// A format past this build's is not malformed: a newer release wrote
	// it, and the error says so.
	if c, err := decodeCheckpoint(seal(append([]byte{checkpointVersion + 1}, valid.body()[1:]...))); c != nil || !errors.Is(err, ErrNewerData) ||
		errors.Is(err, ErrBadCheckpoint) || !strings.Contains(err.Error(), "format 9, written by a newer release") || !strings.Contains(err.Error(), "reads formats up to 8") {
		t.Fatalf("a checkpoint of format 9: %v, %v", c, err)
	}
	good := seal(valid.body())
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"four bytes", []byte{1, 2, 3, 4}},
		{"checksum", append(append([]byte(nil), good[:len(good)-1]...), good[len(good)-1]^1)},
		{"flipped bit", func() []byte { b := bytes.Clone(good); b[9] ^= 1; return b }()},
		{"truncated", seal(valid.body()[:len(valid.body())-1])},
		{"removing neither 0 nor 1", mutate(func(r *rawCheckpoint) { r.removing = 2 })},
		{"malformed identity", mutate(func(r *rawCheckpoint) { r.identity = "g1/xyz" })},
		{"trailing", seal(append(valid.body(), 0))},
		{"negative message end", mutate(func(r *rawCheckpoint) { r.msgEnd = -1 })},
		{"dedup past the end", mutate(func(r *rawCheckpoint) { r.dedupFrom = 101 })},
		{"dedup below -1", mutate(func(r *rawCheckpoint) { r.dedupFrom = -2 })},
		{"bad subject", mutate(func(r *rawCheckpoint) { r.subjects = []string{"../x"} })},
		{"window too short", mutate(func(r *rawCheckpoint) { r.consumers[0].next = 4 })},
		{"next below ack", mutate(func(r *rawCheckpoint) { r.consumers[1].ackPos, r.consumers[1].next = 2, 1 })},
		// Encodings the encoder never writes: refused, so that a checkpoint
		// has one encoding and never describes contradictory state.
		{"duplicate subject", mutate(func(r *rawCheckpoint) { r.subjects = []string{"a", "a"} })},
		{"unsorted subjects", mutate(func(r *rawCheckpoint) { r.subjects = []string{"b", "a"} })},
		{"duplicate group", mutate(func(r *rawCheckpoint) { r.groups = [][2]string{{"a", "g"}, {"a", "g"}} })},
		{"unsorted groups", mutate(func(r *rawCheckpoint) { r.groups = [][2]string{{"b", "g"}, {"a", "g"}} })},
		{"duplicate consumer", mutate(func(r *rawCheckpoint) { r.consumers[1] = r.consumers[0]; r.consumers[1].epoch = 2 })},
		{"duplicate epoch", mutate(func(r *rawCheckpoint) { r.consumers[1].epoch = 1 })},
		{"unsorted epochs", mutate(func(r *rawCheckpoint) { r.consumers[0].epoch, r.consumers[1].epoch = 2, 1 })},
		{"epoch past the next", mutate(func(r *rawCheckpoint) { r.nextEpoch = 2 })},
		{"consumer without its group", mutate(func(r *rawCheckpoint) { r.consumers[1].g = "h" })},
		{"acked byte 2", mutate(func(r *rawCheckpoint) {
			r.consumers[0].window = [][3]uint64{{5, 0, 2}, {6, 1, 0}}
		})},
		{"duplicate member", mutate(func(r *rawCheckpoint) { r.members = [][2]string{{"n1", "x"}, {"n1", "y"}} })},
		{"unsorted members", mutate(func(r *rawCheckpoint) { r.members = [][2]string{{"n2", "x"}, {"n1", "y"}} })},
		{"journal end inside a record", mutate(func(r *rawCheckpoint) { r.journalEnd = 40 })},
		{"dispatch end inside a record", mutate(func(r *rawCheckpoint) { r.hours[1][3] = 8 })},
		{"pending without records", mutate(func(r *rawCheckpoint) { r.hours[0][2] = 0 })},
		{"unsorted hours", mutate(func(r *rawCheckpoint) { r.hours = [][4]uint64{r.hours[1], r.hours[0]} })},
		{"hour out of range", mutate(func(r *rawCheckpoint) { r.hours = [][4]uint64{{1 << 40, 3, 1, 0}} })},
		{"pending by hour and by subject differ", mutate(func(r *rawCheckpoint) { r.delayed = r.delayed[:1] })},
		{"zero delayed for a subject", mutate(func(r *rawCheckpoint) {
			r.delayed = []rawDelayed{{"a", 3}, {"b", 0}}
		})},
		{"overflowing pending", mutate(func(r *rawCheckpoint) {
			r.hours = [][4]uint64{{493_000, 1 << 63, 1, 0}, {493_001, 1 << 63, 1, 0}}
		})},
		{"retries beyond what the hours hold", mutate(func(r *rawCheckpoint) { r.retries = 1 })},
		{"settings out of bounds", mutate(func(r *rawCheckpoint) {
			r.group = &group{settings: ConsumerGroupSettings{MaxDeliveries: 0}}
		})},
		{"group life past the last given", mutate(func(r *rawCheckpoint) {
			r.group = &group{settings: DefaultConsumerGroupSettings(), gen: 1}
		})},
		{"dead letter after too many deliveries", mutate(func(r *rawCheckpoint) {
			r.group = &group{settings: DefaultConsumerGroupSettings(), dead: []deadLetter{{seq: 1, deliveries: limits.MaxDeliveries + 1}}}
		})},
		{"configuration out of bounds", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.MaxPull = limits.MaxMaxPull + 1
			r.config = &c
		})},
		{"segments under their bound", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.SegmentSize = limits.MinSegmentSize - 1
			r.config = &c
		})},
		{"the node's configuration in version 5, with values", func() []byte {
			r := valid
			r.config = &groupConfig{source: ConfigNode}
			return seal(binenc.AppendUvarint(r.body(), 0)) // values after the node's own source
		}()},
		{"a group's configuration set by no entry", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source = ConfigGroup
			r.config = &c
		})},
		{"an unknown group's application", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps([][3]string{{"a", "nope", "billing"}}, nil, nil)
		})},
		{"groups' applications out of order", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps([][3]string{{"b", "g", "billing"}, {"a", "g", "billing"}}, nil, nil)
		})},
		{"an application that is no name", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps(nil, map[uint64]string{1: "no name"}, nil)
		})},
		{"an unknown consumer's application", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps(nil, map[uint64]string{9: "billing"}, nil)
		})},
		{"an hour's count of an hour not held", mutate(func(r *rawCheckpoint) { r.apps = rawHourCounts([]any{493_005, 1}) })},
		{"an hour's count of none", mutate(func(r *rawCheckpoint) { r.apps = rawHourCounts([]any{493_000, 0}) })},
		{"an hour's applications over its count", mutate(func(r *rawCheckpoint) { r.apps = rawHourCounts([]any{493_000, 2, "a", 2, "b", 1}) })},
		{"hours' counts out of order", mutate(func(r *rawCheckpoint) { r.apps = rawHourCounts([]any{493_001, 1}, []any{493_000, 1}) })},
		{"an application with no delayed message", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps(nil, nil, [][2]any{{"billing", uint64(0)}})
		})},
		{"more delayed messages by application than pending", mutate(func(r *rawCheckpoint) {
			r.apps = rawApps(nil, nil, [][2]any{{"billing", uint64(2)}, {"ops", uint64(2)}})
		})},
		{"an initial configuration set by an entry", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.index = 3
			r.config = &c
		})},
		{"an unknown configuration source", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source, c.index = 3, 3
			r.config = &c
		})},
		// States no apply writes, each of which decoded: a state has one
		// encoding, the one encode() writes.
		{"version 6 holding no timeline (written as version 5)", mutate(func(r *rawCheckpoint) {
			r.version, r.timelineZero = 6, true
		})},
		{"version 7 holding no stored bytes (written as version 6)", mutate(func(r *rawCheckpoint) {
			r.version, r.storedBytes = 7, []uint64{0, 0}
		})},
		{"version 8 holding no active version (written as version 4 to 7)", mutate(func(r *rawCheckpoint) {
			r.activeZero = true
		})},
		{"a timeline ending before its start", mutate(func(r *rawCheckpoint) {
			r.timelineEnd = 1 << 63
		})},
		{"version 5 holding nothing of version 5 (written as version 4)", mutate(func(r *rawCheckpoint) {
			r.version = 5
			r.config = &groupConfig{source: ConfigNode}
			r.apps = rawHourCounts([]any{493_000, 2}, []any{493_001, 2}) // what version 4 derives
		})},
		{"the defaults with a value that is not one", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.MaxPull = 7
			r.config = &c
		})},
		{"the defaults with a dedup floor", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.dedupFloor = 500
			r.config = &c
		})},
		{"a group's configuration set past the applied index", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source, c.index = ConfigGroup, 2
			r.config = &c
		})},
		{"a group's retention age below its dedup window", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source, c.index, c.RetentionAge = ConfigGroup, 1, 1
			r.config = &c
		})},
		{"a group's retention size below a segment", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source, c.index, c.RetentionBytes = ConfigGroup, 1, c.SegmentSize-1
			r.config = &c
		})},
		{"a dedup floor past the state's time", mutate(func(r *rawCheckpoint) {
			c := initialGroupConfig()
			c.source, c.index, c.dedupFloor = ConfigGroup, 1, 1001
			r.config = &c
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := decodeCheckpoint(tc.b)
			if !errors.Is(err, ErrBadCheckpoint) || c != nil {
				t.Fatalf("decodeCheckpoint = %v, %v; want ErrBadCheckpoint", c, err)
			}
		})
	}
}

func mustDecodeCheckpoint(tb testing.TB, b []byte) *checkpoint {
	tb.Helper()
	c, err := decodeCheckpoint(b)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestOpenRefusesBadCheckpoint(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, 1, unitMsg("a", "s", 1))
	takeSnapshot(t, f)
	f.Close()
	path := filepath.Join(cfg.Dir, dataDir, checkpointFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[3] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if g, err := Open(cfg); !errors.Is(err, ErrBadCheckpoint) {
		if g != nil {
			g.Close()
		}
		t.Fatalf("Open with a corrupt checkpoint: %v, want ErrBadCheckpoint", err)
	}
}

// retentionWorkload returns n entries appending ~100 KiB messages to two
// subjects, with pulls and acks of two groups, at a leader time moving
// 10 s an entry.
func retentionWorkload(n int) []*raft.Log {
	var out []*raft.Log
	for i := 1; i <= n; i++ {
		now := int64(i * 10_000)
		subject := []string{"s", "t"}[i%2]
		var cmd encoder
		switch i % 4 {
		case 0, 1, 2:
			cmd = &Append{Now: now, Messages: []*message.Message{bigMsg(fmt.Sprint("m", i), subject), bigMsg(fmt.Sprint("m", i-6), subject)}}
		case 3:
			if i%8 == 3 {
				cmd = &Pull{Start: StartEarliest, Now: now, Subject: subject, ConsumerGroup: "g", Consumer: "c", Max: 3}
			} else {
				cmd = &Ack{Now: now, Subject: subject, ConsumerGroup: "g", Consumer: "c", Ranges: []message.AckRange{{First: 0, Last: 0}}}
			}
		}
		out = append(out, unitEntry(uint64(i), cmd))
	}
	return out
}

func TestRestartAfterRetention(t *testing.T) {
	// Retention removes segments well after the last snapshot: the restarted
	// FSM must still open, and replay must give what the reference gave.
	for _, r := range []logs.Retention{{MaxBytes: 3 << 20}, {MaxAge: 200_000}} {
		t.Run(fmt.Sprintf("%+v", r), func(t *testing.T) {
			entries := retentionWorkload(120)
			ref := retentionFSM(t, r)
			want := applyAll(ref, entries)

			cfg := unitConfig(t.TempDir())
			cfg.Retention = r
			f := unitOpen(t, cfg)
			applyAll(f, entries[:10])
			takeSnapshot(t, f)
			applyAll(f, entries[10:90])
			if f.store.messages.Log().Start() == 0 {
				t.Fatal("no retention after the snapshot")
			}
			f.Close()

			g := unitOpen(t, cfg)
			// Retention checkpointed before it removed segments.
			applied := g.Applied()
			if applied <= 10 || applied > 90 {
				t.Fatalf("reopened at %d", applied)
			}
			// Raft replays from its snapshot (index 10); the entries up to the
			// checkpoint are skipped, the rest answer as the first time.
			for i, got := range applyAll(g, entries[10:]) {
				index := uint64(11 + i)
				if index <= applied && got != "nil" {
					t.Fatalf("entry %d at or below the checkpoint %d: %s", index, applied, got)
				}
				if index > applied && got != want[index-1] {
					t.Fatalf("entry %d: %s, first time %s", index, got, want[index-1])
				}
			}
			wantSameFiles(t, ref.cfg.Dir, cfg.Dir)
			wantSameReads(t, ref, g)
			if !bytes.Equal(stateBytes(ref), stateBytes(g)) {
				t.Fatal("state differs from the reference")
			}
		})
	}
}

// rawApps encodes version 5's lists of applications: groups (subject,
// group, application), consumers (epoch: application, in epoch order) and
// delayed messages pending ((application, count) in the order given).
func rawApps(groups [][3]string, consumers map[uint64]string, delayed [][2]any) []byte {
	b := binenc.AppendUvarint(nil, uint64(len(groups)))
	for _, g := range groups {
		b = binenc.AppendString(appendNames(b, g[0], g[1], ""), g[2])
	}
	b = binenc.AppendUvarint(b, uint64(len(consumers)))
	for _, epoch := range slices.Sorted(maps.Keys(consumers)) {
		b = binenc.AppendString(binenc.AppendUvarint(b, epoch), consumers[epoch])
	}
	b = binenc.AppendUvarint(b, uint64(len(delayed)))
	for _, d := range delayed {
		b = binenc.AppendUvarint(binenc.AppendString(b, d[0].(string)), d[1].(uint64))
	}
	return append(b, 0) // no hour's count
}

// rawHourCounts encodes version 5's applications' lists with none but the
// hours' counts: (hour, delayed, then (application, count) pairs).
func rawHourCounts(hours ...[]any) []byte {
	b := binenc.AppendUvarint([]byte{0, 0, 0}, uint64(len(hours)))
	for _, h := range hours {
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, uint64(h[0].(int))), uint64(h[1].(int)))
		b = binenc.AppendUvarint(b, uint64((len(h)-2)/2))
		for i := 2; i < len(h); i += 2 {
			b = binenc.AppendUvarint(binenc.AppendString(b, h[i].(string)), uint64(h[i+1].(int)))
		}
	}
	return b
}

// A checkpoint holding nothing else of version 5 was written in version 4,
// which has no per-hour count of delayed messages: reading it back derived
// the count from the hour's pending and dispatched records, which count
// nack retries too, and a restarted replica's hour held more delayed
// messages than one that never stopped (its bound of the hour then refused
// differently). A state whose hour counts the derivation would not give
// back is written in version 5.
func TestHourCountSurvivesARestart(t *testing.T) {
	f := unitFSM(t) // a group with no identity and no configuration yet: nothing of version 5
	hour := unitHour + 2
	due := hour*delaywheel.HourMillis + 5
	appendAt(t, f, 1, unitNow, unitMsg("m", "s", 10))
	p := resultAs[*PullResult](t, applyAt(f, 2, &Pull{Now: unitNow, Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1, Start: StartEarliest}))
	if len(p.Entries) != 1 {
		t.Fatalf("pulled %d", len(p.Entries))
	}
	resultAs[*NackResult](t, applyAt(f, 3, &Nack{Now: unitNow, Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: p.Epoch, RetryAt: due,
		Ranges: []message.AckRange{{First: p.Entries[0].PullSeq, Last: p.Entries[0].PullSeq}}})) // a retry due in the hour
	appendAt(t, f, 4, unitNow, delayedMsg("d", "s", due))
	live := *f.st.hours[hour]
	takeSnapshot(t, f)
	cfg := f.cfg
	f.Close()
	g := unitOpen(t, cfg)
	if back := *g.st.hours[hour]; back.delayed != live.delayed || back.pending != live.pending {
		t.Errorf("hour %s holds %d delayed messages (%d pending) on a replica that never stopped, %d (%d pending) after a restart",
			delaywheel.HourName(hour), live.delayed, live.pending, back.delayed, back.pending)
	}
	// With no retry in any hour the derivation holds: still version 4, for
	// the previous release to read.
	h := unitFSM(t)
	appendAt(t, h, 1, unitNow, delayedMsg("d", "s", due))
	if v := h.currentCheckpoint().encode()[0]; v != 4 {
		t.Errorf("a state holding nothing of version 5 is encoded in version %d", v)
	}
}
