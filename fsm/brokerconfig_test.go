package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// nodeConfigs are three nodes' own values of every setting apply decides
// with, each different from the others and from the defaults.
func nodeConfigs(dirs ...string) []Config {
	tweaks := []func(*Config){
		func(c *Config) {
			c.SegmentSize, c.IndexSegmentSize = 1<<20, 64<<10
			c.Retention = logs.Retention{MaxBytes: 3 << 20}
			c.DedupWindow, c.MaxPull, c.MaxUnacked = 10*time.Minute, 7, 30
		},
		func(c *Config) {
			c.SegmentSize, c.IndexSegmentSize = 2<<20, 128<<10
			c.Retention = logs.Retention{MaxBytes: 5 << 20}
			c.DedupWindow, c.MaxPull, c.MaxUnacked = 2*time.Minute, 3, 12
		},
		func(c *Config) {
			c.SegmentSize, c.IndexSegmentSize = 4<<20, 256<<10
			c.Retention = logs.Retention{MaxAge: time.Hour.Milliseconds()}
			c.DedupWindow, c.MaxPull, c.MaxUnacked = 5*time.Minute, 50, 100
		},
	}
	out := make([]Config, len(dirs))
	for i, dir := range dirs {
		out[i] = DefaultConfig(dir)
		tweaks[i%len(tweaks)](&out[i])
	}
	return out
}

// flagsWorkload returns entries from index first on, at times from now
// on: appends of 100 KiB messages (ten fill a 1 MiB segment), pulls of
// more than any MaxPull, acks, and ids sent again 3 and 7 minutes later
// (within some nodes' dedup window and not others').
func flagsWorkload(first uint64, now int64, rounds int) []*raft.Log {
	var out []*raft.Log
	idx := first
	add := func(cmd encoder) {
		out = append(out, unitEntry(idx, cmd))
		idx++
	}
	for r := range rounds {
		at := now + int64(r)*1000
		var msgs []*message.Message
		for k := range 6 {
			msgs = append(msgs, bigMsg(fmt.Sprint("m", now, "-", r, "-", k), "s"))
		}
		add(&Append{Now: at, Messages: msgs})
		add(&Pull{Start: StartEarliest, Now: at, Subject: "s", ConsumerGroup: "g1", Consumer: "c1", Max: 60})
		add(&Pull{Start: StartEarliest, Now: at, Subject: "s", ConsumerGroup: "g2", Consumer: "c1", Max: 9})
		add(&Ack{Now: at, Subject: "s", ConsumerGroup: "g1", Consumer: "c1", Ranges: []message.AckRange{{First: int64(r), Last: int64(r) + 1}}})
	}
	for _, later := range []int64{3 * 60_000, 7 * 60_000} {
		at := now + int64(rounds)*1000 + later
		add(&Append{Now: at, Messages: []*message.Message{bigMsg(fmt.Sprint("m", now, "-0-0"), "s"), bigMsg(fmt.Sprint("m", now, "-1-1"), "s")}})
		add(&Pull{Start: StartEarliest, Now: at, Subject: "s", ConsumerGroup: "g3", Consumer: "c1", Max: 100})
	}
	return out
}

// wantSameReplicas requires replicas to have answered alike and to hold
// the same state and byte-identical logs.
func wantSameReplicas(t *testing.T, answers [][]string, fs ...*FSM) {
	t.Helper()
	for i := range fs[1:] {
		for k := range answers[0] {
			if answers[0][k] != answers[i+1][k] {
				t.Fatalf("entry %d: replicas answered\n%.300s\n%.300s", k, answers[0][k], answers[i+1][k])
			}
		}
		wantSameFiles(t, fs[0].cfg.Dir, fs[i+1].cfg.Dir)
		if a, b := stateBytes(fs[0]), stateBytes(fs[i+1]); !bytes.Equal(a, b) {
			t.Fatalf("replicated state differs between %s and %s", fs[0].cfg.Dir, fs[i+1].cfg.Dir)
		}
	}
}

// seedEntry is the entry a new group's first leader proposes before
// anything that depends on the configuration: its own values as the seed.
func seedEntry(index uint64, c BrokerConfig) *raft.Log {
	return unitEntry(index, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: c})
}

// TestReplicasOpenedWithDifferentConfigsApplyAlike opens three state
// machines of one new group, each with its own retention, dedup window,
// pull and unacked bounds and segment sizes, and applies the same entries
// to them, from the first leader's seed (which the server proposes before
// it serves anything): they answer alike and hold the same state and logs.
func TestReplicasOpenedWithDifferentConfigsApplyAlike(t *testing.T) {
	cfgs := nodeConfigs(t.TempDir(), t.TempDir(), t.TempDir())
	var fs []*FSM
	for _, cfg := range cfgs {
		f, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	entries := append([]*raft.Log{seedEntry(1, cfgs[1].BrokerConfig())}, flagsWorkload(2, 1_000_000, 12)...)
	answers := make([][]string, len(fs))
	for i, f := range fs {
		answers[i] = applyAll(f, entries)
	}
	wantSameReplicas(t, answers, fs...)
}

// openReplicas opens a state machine on each of cfgs with Open (not
// unitOpen, so that a new group's configuration is its own).
func openReplicas(t *testing.T, cfgs []Config) []*FSM {
	t.Helper()
	var fs []*FSM
	for _, cfg := range cfgs {
		f, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs = append(fs, f)
	}
	return fs
}

// applyEach applies entries to every replica, adding the answers to
// answers.
func applyEach(answers [][]string, entries []*raft.Log, fs ...*FSM) {
	for i, f := range fs {
		answers[i] = append(answers[i], applyAll(f, entries)...)
	}
}

// TestReplicasFollowTheGroupsConfiguration drives three replicas opened
// with different values of their own through a seed (before anything that
// depends on the configuration, as a new group's first leader proposes
// it), a second seed that must change nothing, operators' changes of every setting (retention off
// and on again, the dedup window shorter and longer, other segment sizes,
// the pull and unacked bounds), and restarts from checkpoints taken before
// and between the changes: they answer alike and hold the same state and
// logs throughout, and go by the group's values. (The restarts replay no
// removal by retention: a restart after one is another test's.)
func TestReplicasFollowTheGroupsConfiguration(t *testing.T) {
	cfgs := nodeConfigs(t.TempDir(), t.TempDir(), t.TempDir())
	fs := openReplicas(t, cfgs)
	answers := make([][]string, len(fs))
	var log []*raft.Log // every entry so far, for restarts to replay
	now := int64(1_000_000)
	next := func() uint64 { return uint64(len(log) + 1) }
	step := func(entries []*raft.Log) {
		t.Helper()
		applyEach(answers, entries, fs...)
		log = append(log, entries...)
		wantSameReplicas(t, answers, fs...)
	}
	set := func(c *SetBrokerConfig) {
		t.Helper()
		c.Now = now
		step([]*raft.Log{unitEntry(next(), c)})
	}
	work := func(rounds int) {
		step(flagsWorkload(next(), now, rounds))
		now += int64(rounds)*1000 + 8*60_000
	}

	seed := cfgs[0].BrokerConfig()
	set(&SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: seed})
	if got := fs[2].BrokerConfig(); got.BrokerConfig != seed || got.Source != ConfigGroup || got.Index != uint64(len(log)) {
		t.Fatalf("after the seed: %+v, want %+v from entry %d", got, seed, len(log))
	}
	work(11)
	if fs[1].store.messages.Log().Start() == 0 {
		t.Fatal("the seed's retention removed nothing")
	}
	// A second seed, of another node's values: the group has its
	// configuration already.
	set(&SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: cfgs[1].BrokerConfig()})
	if got := fs[1].BrokerConfig().BrokerConfig; got != seed {
		t.Fatalf("a second seed changed the configuration to %+v", got)
	}
	set(&SetBrokerConfig{Set: SetRetentionBytes | SetRetentionAge})

	// A checkpoint of one replica before the changes, and one of another
	// between them: both restart from there and replay the rest.
	takeSnapshot(t, fs[1])
	changes := []*SetBrokerConfig{
		{Set: SetDedupWindow, Config: BrokerConfig{DedupWindow: 60_000}},
		{Set: SetSegmentSize | SetIndexSegmentSize | SetMaxPull, Config: BrokerConfig{SegmentSize: 3 << 20, IndexSegmentSize: 96 << 10, MaxPull: 4}},
		{Set: SetDedupWindow | SetMaxUnacked, Config: BrokerConfig{DedupWindow: 20 * 60_000, MaxUnacked: 40}},
	}
	want := seed
	want.RetentionAge, want.RetentionBytes = 0, 0
	for i, c := range changes {
		set(c)
		want = c.With(want)
		work(4)
		if i == 1 {
			takeSnapshot(t, fs[2])
		}
	}
	if got := fs[0].BrokerConfig().BrokerConfig; got != want {
		t.Fatalf("after the changes: %+v, want %+v", got, want)
	}
	for _, i := range []int{1, 2} {
		if err := fs[i].Close(); err != nil {
			t.Fatal(err)
		}
		f, err := Open(cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if f.Applied() == uint64(len(log)) {
			t.Fatalf("replica %d restarted with nothing to replay", i)
		}
		applyAll(f, log) // entries up to its checkpoint are passed over
		fs[i] = f
	}
	wantSameReplicas(t, answers, fs...)
	if got := fs[1].BrokerConfig().BrokerConfig; got != want {
		t.Fatalf("after the restarts: %+v, want %+v", got, want)
	}
	set(&SetBrokerConfig{Set: SetRetentionBytes | SetRetentionAge, Config: BrokerConfig{RetentionBytes: 4 << 20, RetentionAge: 25 * 60_000}})
	start := fs[0].store.messages.Log().Start()
	work(6)
	if fs[2].store.messages.Log().Start() == start {
		t.Fatal("retention set again removed nothing")
	}
}

// TestDedupWindowChangeAnswersAsARestartWould changes the dedup window,
// shorter then longer, between sends and resends of immediate and delayed
// messages, on a live replica and on one restarted from a checkpoint taken
// before the changes: both answer every resend alike and hold the same
// state. A shorter window forgets at once what it no longer covers; a
// longer one cannot recall what the shorter one forgot, but keeps for the
// new window what is sent after it.
func TestDedupWindowChangeAnswersAsARestartWould(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	live, other := unitFSM(t), unitOpen(t, cfg)
	var log []*raft.Log
	apply := func(cmd encoder) any {
		t.Helper()
		e := unitEntry(uint64(len(log)+1), cmd)
		log = append(log, e)
		ra, rb := live.Apply(e), other.Apply(e)
		if a, b := describe(ra), describe(rb); a != b {
			t.Fatalf("entry %d: replicas answered\n%s\n%s", e.Index, a, b)
		}
		return ra
	}
	const minute = 60_000
	// send sends ids at time at (those starting with d delayed by an hour)
	// and returns what became of each: A appended, S scheduled, D duplicate.
	send := func(at int64, ids ...string) string {
		t.Helper()
		var msgs []*message.Message
		for _, id := range ids {
			m := unitMsg(id, "s", 10)
			if id[0] == 'd' {
				m.DeliverAt = at + 60*minute
			}
			msgs = append(msgs, m)
		}
		res := resultAs[*AppendResult](t, apply(&Append{Now: at, Messages: msgs}))
		out := ""
		for _, m := range res.Messages {
			out += map[MessageStatus]string{Appended: "A", Scheduled: "S", Duplicate: "D", Rejected: "R"}[m.Status]
		}
		return out
	}
	want := func(got, want, what string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %s, want %s", what, got, want)
		}
	}
	setWindow := func(at, window int64) {
		t.Helper()
		resultAs[*BrokerConfigResult](t, apply(&SetBrokerConfig{Now: at, Set: SetDedupWindow, Config: BrokerConfig{DedupWindow: window}}))
	}
	resultAs[*BrokerConfigResult](t, apply(&SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: cfg.BrokerConfig()}))
	t0 := int64(1_800_000_000_000)
	for k := range 12 { // a send every 50 s: ids across several buckets of the 10-minute window
		send(t0+int64(k)*50_000, fmt.Sprint("a", k), fmt.Sprint("d", k))
	}
	takeSnapshot(t, other)
	t1 := t0 + 11*50_000
	want(send(t1+1000, "a11", "d11", "a6", "d6"), "DDDD", "resends within the 10-minute window")
	setWindow(t1+2000, minute)
	want(send(t1+3000, "a11", "d11", "a9", "d9"), "DDAS", "resends after the window shortened to a minute")
	setWindow(t1+4000, 20*minute)
	want(send(t1+5000, "a8", "d8"), "AS", "resends the one-minute window had forgotten")
	send(t1+6000, "b1")
	want(send(t1+15*minute, "b1", "a11", "d11"), "DDD", "resends within the 20-minute window")
	send(t1+16*minute, "b2")

	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	other = unitOpen(t, cfg)
	applyAll(other, log)
	if a, b := stateBytes(live), stateBytes(other); !bytes.Equal(a, b) {
		t.Fatal("the restarted replica's state differs")
	}
	e := unitEntry(uint64(len(log)+1), &Append{Now: t1 + 17*minute, Messages: []*message.Message{unitMsg("b1", "s", 10), unitMsg("b2", "s", 10), unitMsg("a9", "s", 10)}})
	if a, b := describe(live.Apply(e)), describe(other.Apply(e)); a != b {
		t.Fatalf("after the restart, replicas answered\n%s\n%s", a, b)
	}
	wantSameFiles(t, live.cfg.Dir, other.cfg.Dir)
}

// TestBrokerConfigRefusedPastItsBounds sets every setting at its bounds,
// which is accepted, and under and over them, which is refused alike on
// every replica and changes nothing.
func TestBrokerConfigRefusedPastItsBounds(t *testing.T) {
	f, err := Open(DefaultConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	idx := uint64(0)
	set := func(bits ConfigBits, c BrokerConfig) any {
		idx++
		return applyAt(f, idx, &SetBrokerConfig{Now: 1000, Set: bits, Config: c})
	}
	appendAt(t, f, 1, 1000, unitMsg("m", "s", 10))
	idx++
	def := DefaultBrokerConfig()
	resultAs[*BrokerConfigResult](t, set(SetAllConfig, def)) // a change of some settings needs a configuration
	for _, tc := range []struct {
		name   string
		bits   ConfigBits
		at     BrokerConfig   // accepted
		past   []BrokerConfig // refused
		wantIn string         // in the refusal
	}{
		{"segment-size low", SetSegmentSize, BrokerConfig{SegmentSize: limits.MinSegmentSize},
			[]BrokerConfig{{SegmentSize: limits.MinSegmentSize - 1}, {SegmentSize: 0}}, "segment-size"},
		{"segment-size high", SetSegmentSize, BrokerConfig{SegmentSize: limits.MaxSegmentSize},
			[]BrokerConfig{{SegmentSize: limits.MaxSegmentSize + 1}}, "segment-size"},
		{"index-segment-size low", SetIndexSegmentSize, BrokerConfig{IndexSegmentSize: limits.MinIndexSegmentSize},
			[]BrokerConfig{{IndexSegmentSize: limits.MinIndexSegmentSize - 1}}, "index-segment-size"},
		{"index-segment-size high", SetIndexSegmentSize, BrokerConfig{IndexSegmentSize: limits.MaxIndexSegmentSize},
			[]BrokerConfig{{IndexSegmentSize: limits.MaxIndexSegmentSize + 1}}, "index-segment-size"},
		{"dedup-window", SetDedupWindow, BrokerConfig{DedupWindow: maxDedupWindow},
			[]BrokerConfig{{DedupWindow: maxDedupWindow + 1}, {DedupWindow: -1}}, "dedup-window"},
		{"dedup-window none", SetDedupWindow, BrokerConfig{DedupWindow: 0}, nil, ""},
		{"max-pull", SetMaxPull, BrokerConfig{MaxPull: limits.MaxMaxPull},
			[]BrokerConfig{{MaxPull: limits.MaxMaxPull + 1}, {MaxPull: 0}, {MaxPull: -1}}, "max-pull"},
		{"max-pull low", SetMaxPull, BrokerConfig{MaxPull: 1}, nil, ""},
		{"max-unacked", SetMaxUnacked, BrokerConfig{MaxUnacked: limits.MaxMaxUnacked},
			[]BrokerConfig{{MaxUnacked: limits.MaxMaxUnacked + 1}, {MaxUnacked: 0}}, "max-unacked"},
		{"max-unacked low", SetMaxUnacked, BrokerConfig{MaxUnacked: 1}, nil, ""},
		{"retention-age at the window", SetRetentionAge | SetDedupWindow, BrokerConfig{RetentionAge: def.DedupWindow, DedupWindow: def.DedupWindow},
			[]BrokerConfig{{RetentionAge: def.DedupWindow - 1, DedupWindow: def.DedupWindow}, {RetentionAge: 1, DedupWindow: def.DedupWindow}}, "below the dedup-window"},
		{"a window past the retention age", SetDedupWindow, BrokerConfig{DedupWindow: def.DedupWindow},
			[]BrokerConfig{{DedupWindow: def.DedupWindow + 1}}, "below the dedup-window"},
		{"retention-age high", SetRetentionAge, BrokerConfig{RetentionAge: maxRetentionAge},
			[]BrokerConfig{{RetentionAge: maxRetentionAge + 1}}, "retention-age"},
		{"retention-size at a segment", SetRetentionBytes | SetSegmentSize, BrokerConfig{RetentionBytes: 2 << 20, SegmentSize: 2 << 20},
			[]BrokerConfig{{RetentionBytes: 2<<20 - 1, SegmentSize: 2 << 20}}, "below one message-log segment"},
		{"a segment past the retention size", SetSegmentSize, BrokerConfig{SegmentSize: 2 << 20},
			[]BrokerConfig{{SegmentSize: 2<<20 + 1}}, "below one message-log segment"},
		{"retention-size high", SetRetentionBytes, BrokerConfig{RetentionBytes: limits.MaxRetentionBytes},
			[]BrokerConfig{{RetentionBytes: limits.MaxRetentionBytes + 1}}, "retention-size"},
		{"no retention", SetRetentionAge | SetRetentionBytes, BrokerConfig{}, nil, ""},
		{"an unknown setting", SetAllConfig, def, []BrokerConfig{def}, "unknown settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range tc.past {
				before, beforeConfig := stateBytes(f), f.BrokerConfig()
				bits := tc.bits
				if tc.wantIn == "unknown settings" {
					bits |= 1 << 7
				}
				r := set(bits, c)
				err, ok := r.(error)
				if !ok || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantIn) {
					t.Fatalf("%+v: %v, want a refusal naming %s", c, r, tc.wantIn)
				}
				wantStateUnchanged(t, f, before)
				if f.BrokerConfig() != beforeConfig {
					t.Fatal("the configuration changed")
				}
			}
			r := resultAs[*BrokerConfigResult](t, set(tc.bits, tc.at))
			if !r.Changed || r.Config.Index != idx || r.Config.BrokerConfig != (&SetBrokerConfig{Set: tc.bits, Config: tc.at}).With(r.Config.BrokerConfig) {
				t.Fatalf("%+v: %+v", tc.at, r)
			}
		})
	}
}

// A state machine whose checkpoint is of version 4 (written before the
// broker group configuration) opens with the node's own values, which it
// applied by, and writes its checkpoints without the group's values until
// a seed comes (in version 4, or 6 once the timeline holds records); from
// then on with the group's values, whatever the node's.
func TestCheckpointOfVersion4OpensWithTheNodesValues(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	cfg.MaxPull, cfg.Retention = 5, logs.Retention{MaxBytes: 4 << 20}
	f := unitOpen(t, cfg)
	applyAll(f, unitWorkload(30, 10))
	f.st.config.source = ConfigNode // as if loaded from version 4
	takeSnapshot(t, f)
	want := byte(4)
	if f.store.timeline.End() > 0 {
		want = checkpointVersion
	}
	f.Close()
	version := func() byte {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, dataDir, checkpointFile))
		if err != nil {
			t.Fatal(err)
		}
		return b[0]
	}
	if v := version(); v != want {
		t.Fatalf("checkpoint version %d, want %d", v, want)
	}
	other := cfg
	other.MaxPull, other.SegmentSize = 9, 2<<20
	f, err := Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.BrokerConfig(); got.Source != ConfigNode || got.BrokerConfig != other.BrokerConfig() {
		t.Fatalf("opened with %+v, want the node's own %+v", got, other.BrokerConfig())
	}
	res := pullAt(t, f, 31, 1_100_000, "orders", "new", "c", 100)
	if len(res.Entries) != 9 {
		t.Fatalf("a pull handed out %d entries, want the node's MaxPull of 9", len(res.Entries))
	}
	seed := cfg.BrokerConfig()
	resultAs[*BrokerConfigResult](t, applyAt(f, 32, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: seed}))
	takeSnapshot(t, f)
	if v := version(); v != 5 {
		// A group below version 2 writes no timeline: version 5 holds the
		// configuration.
		t.Fatalf("checkpoint version %d after the seed, want 5", v)
	}
	f.Close()
	f, err = Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.BrokerConfig(); got.Source != ConfigGroup || got.BrokerConfig != seed || got.Index != 32 {
		t.Fatalf("reopened with %+v, want the group's %+v", got, seed)
	}
}

// A node whose own values differ from its group's configuration says so
// once, naming each setting with both values, when it opens and when it
// learns the configuration, and follows the group's.
func TestNodeWarnsOnceThatItsValuesDiffer(t *testing.T) {
	var buf bytes.Buffer
	cfg := DefaultConfig(t.TempDir())
	cfg.MaxPull, cfg.DedupWindow = 7, 2*time.Minute
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	f, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	group := cfg.BrokerConfig()
	group.MaxPull, group.SegmentSize = 20, 2<<20
	resultAs[*BrokerConfigResult](t, applyAt(f, 1, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: group}))
	resultAs[*BrokerConfigResult](t, applyAt(f, 2, &SetBrokerConfig{Set: SetMaxUnacked, Config: BrokerConfig{MaxUnacked: 5}}))
	warns := func() []string {
		var out []string
		for _, line := range strings.Split(buf.String(), "\n") {
			if strings.Contains(line, "[WARN]") {
				out = append(out, line)
			}
		}
		return out
	}
	w := warns()
	if len(w) != 1 || !strings.Contains(w[0], "max-pull=\"20 (this node's 7)\"") || !strings.Contains(w[0], "segment-size=\"2097152 (this node's 67108864)\"") ||
		strings.Contains(w[0], "dedup-window") {
		t.Fatalf("warnings %q, want one naming max-pull and segment-size with both values", w)
	}
	takeSnapshot(t, f)
	f.Close()
	buf.Reset()
	f, err = Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if w := warns(); len(w) != 1 || !strings.Contains(w[0], "max-unacked=\"5 (this node's 10000)\"") {
		t.Fatalf("warnings on opening %q, want one naming max-unacked", w)
	}
	if got := pullAt(t, f, 3, 1000, "s", "g", "c", 100); len(got.Entries) != 0 {
		t.Fatal("pulled from nothing")
	}
}

// A schedule hour swept under a short dedup window is never scheduled into
// again once the window grows: a delayed message due in it, from a leader
// whose clock is behind the state's, is delivered at once, as one due
// before any swept hour always was.
func TestLongerWindowSchedulesNothingIntoASweptHour(t *testing.T) {
	f := unitFSM(t)
	const minute = 60_000
	h := int64(500_000) * delaywheel.HourMillis
	idx := uint64(0)
	apply := func(cmd encoder) any { idx++; return applyAt(f, idx, cmd) }
	resultAs[*BrokerConfigResult](t, apply(&SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: f.cfg.BrokerConfig()}))
	m := unitMsg("early", "s", 10)
	m.DeliverAt = h + 10*minute
	if r := resultAs[*AppendResult](t, apply(&Append{Now: h + minute, Messages: []*message.Message{m}})); r.Messages[0].Status != Scheduled {
		t.Fatalf("the first delayed message: %+v", r.Messages[0])
	}
	apply(&Fire{Now: h + 11*minute, Refs: []uint64{delaywheel.MakeRef(delaywheel.Hour(m.DeliverAt), 0)}})
	resultAs[*BrokerConfigResult](t, apply(&SetBrokerConfig{Now: h + 12*minute, Set: SetDedupWindow, Config: BrokerConfig{DedupWindow: minute}}))
	apply(&Append{Now: delaywheel.HourMillis + h + 2*minute, Messages: []*message.Message{unitMsg("next-hour", "s", 10)}})
	if _, ok := f.st.hours[delaywheel.Hour(m.DeliverAt)]; ok {
		t.Fatal("the fired hour was not swept")
	}
	resultAs[*BrokerConfigResult](t, apply(&SetBrokerConfig{Now: delaywheel.HourMillis + h + 3*minute, Set: SetDedupWindow, Config: BrokerConfig{DedupWindow: 30 * minute}}))
	late := unitMsg("late", "s", 10)
	late.DeliverAt = delaywheel.HourMillis + h - 10*minute // in the swept hour
	r := resultAs[*AppendResult](t, apply(&Append{Now: delaywheel.HourMillis + h - 20*minute, Messages: []*message.Message{late}}))
	if r.Messages[0].Status != Appended {
		t.Fatalf("a message due in the swept hour: %+v, want it delivered at once", r.Messages[0])
	}
	if _, ok := f.st.hours[delaywheel.Hour(late.DeliverAt)]; ok {
		t.Fatal("the swept hour holds a message again")
	}
}

// openUpgraded opens a state machine as a node of a group upgraded in
// place opens: on a checkpoint of version 4 (here of the empty state, as
// the earlier release wrote it), so that it applies by its own values
// (ConfigNode) until the group is seeded. mutate (if any) adjusts its own
// configuration.
func openUpgraded(t *testing.T, mutate ...func(*Config)) *FSM {
	t.Helper()
	dir := t.TempDir()
	empty := &checkpoint{st: newState(), ends: &logEnds{consume: map[string]int64{}, hours: map[int64]delaywheel.HourEnds{}}, dedupFrom: -1}
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(filepath.Join(dir, dataDir), checkpointFile, empty.encodeVersion(4)); err != nil {
		t.Fatal(err)
	}
	cfg := unitConfig(dir)
	for _, m := range mutate {
		m(&cfg)
	}
	f, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if got := f.BrokerConfig().Source; got != ConfigNode {
		t.Fatalf("an upgraded node opened with its configuration from %s", got)
	}
	return f
}

// A SetBrokerConfig that apply refuses changes nothing, the state's clock
// included: whatever the leader stamped into it, a refused command leaves
// the state as it was, alike on every replica (before, apply stamped the
// time before it checked the change).
func TestRefusedConfigChangeChangesNothing(t *testing.T) {
	f := unitFSM(t)
	appendAt(t, f, 1, unitNow, unitMsg("m", "s", 10))
	resultAs[*BrokerConfigResult](t, applyAt(f, 2, &SetBrokerConfig{Now: unitNow, Set: SetAllConfig, Seed: true, Config: f.cfg.BrokerConfig()}))
	before := stateBytes(f)
	later := unitNow + 3_600_000
	for i, c := range []*SetBrokerConfig{
		{Now: later, Set: SetMaxPull, Config: BrokerConfig{MaxPull: 0}},           // out of its bounds
		{Now: later, Set: SetRetentionAge, Config: BrokerConfig{RetentionAge: 1}}, // below the dedup window
		{Now: later, Set: 0}, // names no setting
		{Now: later, Set: SetAllConfig + 1, Config: f.cfg.BrokerConfig()},                          // a setting this build does not know
		{Now: later, Set: SetAllConfig, Config: BrokerConfig{SegmentSize: 1, IndexSegmentSize: 1}}, // every setting, some out of bounds
	} {
		wantInvalid(t, applyAt(f, uint64(3+i), c))
		wantStateUnchanged(t, f, before)
	}
}

// Before the group's seed each replica of an upgraded group applies by
// its own values (ConfigNode), which may differ from the others'. A change
// that names some settings only would fill the rest from each replica's
// own and make that the group's configuration, different on each replica
// and for good (the seed that follows is passed over): apply refuses it,
// and one that names every setting makes them alike. A change that names
// no setting is refused whatever the source.
func TestChangeBeforeTheSeedNamesEverySetting(t *testing.T) {
	a := openUpgraded(t, func(c *Config) { c.MaxPull = 10 })
	b := openUpgraded(t, func(c *Config) { c.MaxPull = 500 })
	seed := unitConfig("").BrokerConfig()
	all := seed
	all.DedupWindow = 5 * 60_000
	for _, f := range []*FSM{a, b} {
		wantInvalid(t, applyAt(f, 1, &SetBrokerConfig{Now: unitNow, Set: SetDedupWindow, Config: BrokerConfig{DedupWindow: 5 * 60_000}}))
		if got := f.BrokerConfig(); got.Source != ConfigNode {
			t.Fatalf("a refused change left the replica configured by %s at %d", got.Source, got.Index)
		}
		resultAs[*BrokerConfigResult](t, applyAt(f, 2, &SetBrokerConfig{Now: unitNow, Set: SetAllConfig, Config: all}))
		applyAt(f, 3, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: seed}) // passed over
		wantInvalid(t, applyAt(f, 4, &SetBrokerConfig{Now: unitNow, Set: 0}))
	}
	ca, cb := a.BrokerConfig(), b.BrokerConfig()
	if ca != cb || ca.BrokerConfig != all || ca.Source != ConfigGroup || ca.Index != 2 {
		t.Fatalf("the replicas apply by\n%+v\n%+v\nwant %+v, set by the group at entry 2", ca, cb, all)
	}
}

// Two members of an upgraded group whose own dedup windows differed apply
// the same entries (no id resent among them, so their logs are the same)
// and the seed: from then on their replicated state is the same, the dedup
// floor included. Before, the seed set the floor from each node's own
// previous window (or left it, on a node whose window the seed did not
// change), so the replicas' states differed for good. Seeded out of the
// nodes' own values, the floor is the state's time: no replica recalls a
// delayed id, or schedules into an hour, that any window may have swept,
// and a restart rebuilds the same windows.
func TestSeedSetsTheSameDedupFloorOnEveryReplica(t *testing.T) {
	a := openUpgraded(t, func(c *Config) { c.DedupWindow = time.Minute })
	b := openUpgraded(t, func(c *Config) { c.DedupWindow = 10 * time.Minute })
	seed := unitConfig("").BrokerConfig() // the leader's own values: a 10-minute window
	answers := make([][]string, 2)
	for i, f := range []*FSM{a, b} {
		answers[i] = applyAll(f, []*raft.Log{
			unitEntry(1, &Append{Now: unitNow, Messages: []*message.Message{unitMsg("m1", "s", 10), delayedMsg("d1", "s", unitNow+delaywheel.HourMillis)}}),
			unitEntry(2, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: seed}),
			unitEntry(3, &Append{Now: unitNow + 1000, Messages: []*message.Message{unitMsg("m1", "s", 10), delayedMsg("d1", "s", unitNow+delaywheel.HourMillis)}}),
		})
	}
	wantSameReplicas(t, answers, a, b)
	if a.st.config.dedupFloor != unitNow {
		t.Errorf("seeded out of the nodes' own values at %d, the dedup floor is %d", unitNow, a.st.config.dedupFloor)
	}
	takeSnapshot(t, b)
	cfg := b.cfg
	b.Close()
	b = unitOpen(t, cfg)
	if x, y := stateBytes(a), stateBytes(b); !bytes.Equal(x, y) {
		t.Error("restarted after the seed, a replica's state differs")
	}
}

// A node joining a group upgraded in place (its members apply by their own
// values, ConfigNode, until the seed), with an empty directory and the
// same flags, replays the Raft log from entry 1 if the group's log was
// never compacted. It must apply those entries as the members did, by its
// own values, not by DefaultBrokerConfig: with a dedup window of a minute
// a resend two minutes later is stored again on the members, and was
// refused as a duplicate on the joiner (the defaults' 10 minutes), whose
// logs then differed for good.
func TestJoinerOfAnUpgradedGroupAppliesAsItsMembers(t *testing.T) {
	flags := func(c *Config) { c.DedupWindow = time.Minute } // every node of the group runs with --dedup-window 1m
	member := openUpgraded(t, flags)
	cfg := unitConfig(t.TempDir())
	flags(&cfg)
	joiner, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer joiner.Close()
	seed := cfg.BrokerConfig()
	answers := make([][]string, 2)
	for i, f := range []*FSM{member, joiner} {
		answers[i] = applyAll(f, []*raft.Log{
			unitEntry(1, &Append{Now: unitNow, Messages: []*message.Message{unitMsg("retried", "s", 10)}}),
			unitEntry(2, &Append{Now: unitNow + 2*60_000, Messages: []*message.Message{unitMsg("retried", "s", 10)}}), // a resend 2 minutes later
			unitEntry(3, &SetBrokerConfig{Set: SetAllConfig, Seed: true, Config: seed}),
		})
	}
	wantSameReplicas(t, answers, member, joiner)
}
