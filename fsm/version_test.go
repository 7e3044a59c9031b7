package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
)

// checkpointFormat returns the version byte of the checkpoint f's last
// snapshot wrote.
func checkpointFormat(t *testing.T, f *FSM) byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.cfg.Dir, dataDir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	return b[0]
}

// SetVersion raises the active Number, never lowers it, and is idempotent;
// the Number survives a checkpoint and a reopen (checkpoint version 8) and
// a snapshot's restore.
func TestSetVersionMonotone(t *testing.T) {
	r := newGroupRig(t)
	if v := r.f.ActiveVersion(); v != version.V1 {
		t.Fatalf("a new group is at %d, want V1 (nothing recorded)", v)
	}
	r.send("s")
	takeSnapshot(t, r.f)
	if v := checkpointFormat(t, r.f); v > 5 {
		t.Fatalf("a group at V1 wrote checkpoint version %d, want at most 5", v)
	}
	// V1 on a group recording nothing: it is at V1 already.
	before := stateBytes(r.f)
	if res := resultAs[*VersionResult](t, r.apply(&SetVersion{Now: r.now, Version: version.V1})); res.Previous != version.V1 || res.Active != version.V1 {
		t.Fatalf("SetVersion(1) answered %+v", res)
	}
	if !bytes.Equal(stateBytes(r.f), before) || r.f.st.version != 0 {
		t.Fatal("SetVersion(1) changed a group at V1")
	}
	if res := resultAs[*VersionResult](t, r.apply(&SetVersion{Now: r.now, Version: version.V2})); res.Previous != version.V1 || res.Active != version.V2 {
		t.Fatalf("SetVersion(2) answered %+v", res)
	}
	if v := r.f.ActiveVersion(); v != version.V2 {
		t.Fatalf("active %d after SetVersion(2)", v)
	}
	at2 := stateBytes(r.f)
	for _, n := range []version.Number{version.V2, version.V1} {
		if res := resultAs[*VersionResult](t, r.apply(&SetVersion{Now: r.now, Version: n})); res.Previous != version.V2 || res.Active != version.V2 {
			t.Fatalf("SetVersion(%d) at 2 answered %+v", n, res)
		}
		if !bytes.Equal(stateBytes(r.f), at2) || r.f.ActiveVersion() != version.V2 {
			t.Fatalf("SetVersion(%d) changed a group at 2", n)
		}
	}

	takeSnapshot(t, r.f)
	if v := checkpointFormat(t, r.f); v != 8 {
		t.Fatalf("checkpoint version %d at V2, want 8", v)
	}
	stream := snapshotStream(t, r.f)
	cfg := r.f.cfg
	r.f.Close()
	g := unitOpen(t, cfg)
	if v := g.ActiveVersion(); v != version.V2 {
		t.Fatalf("reopened at %d, want 2", v)
	}
	h := restoreInto(t, stream)
	if v := h.ActiveVersion(); v != version.V2 {
		t.Fatalf("restored at %d, want 2", v)
	}
	if !bytes.Equal(stateBytes(h), stateBytes(g)) {
		t.Fatal("the restored state differs")
	}
}

// A SetVersion past what this build applies stops the replica (no panic),
// its message naming the Numbers; so does one past Config.MaxVersion,
// which plays a replica of an earlier release, and so does, there, an
// entry that needs more than it applies.
func TestSetVersionPastMaxStops(t *testing.T) {
	for name, tc := range map[string]struct {
		max  version.Number
		cmd  encoder
		says []string
	}{
		"past this build": {0, &SetVersion{Version: version.Max + 1},
			[]string{"broker group g1's active version is 3", "applies versions 1-2", "run a release that supports version 3"}},
		"past an earlier build": {version.V1, &SetVersion{Version: version.V2},
			[]string{"broker group g1's active version is 2", "applies versions 1-1", "run a release that supports version 2"}},
		"an append of version 3 on an earlier build": {version.V1,
			&Append{Messages: []*message.Message{unitMsg("a", "s", 1)}, Apps: []Sender{{Addr: "10.0.0.1:1"}}, Senders: []int{1}},
			[]string{"append version 3 needs version 2", "applies versions 1-1", "run a release that supports version 2"}},
		"dead letters of version 2 on an earlier build": {version.V1,
			&DeadLetters{Subject: "s", ConsumerGroup: "g", Op: DeadPurge, All: true, By: "app:ops"},
			[]string{"dead-letters version 2 needs version 2", "applies versions 1-1"}},
	} {
		t.Run(name, func(t *testing.T) {
			var fatal []error
			f := unitFSM(t, func(c *Config) {
				c.Group, c.MaxVersion = "g1", tc.max
				c.OnFatal = func(err error) { fatal = append(fatal, err) }
			})
			appendN(t, f, 1, "s", "m", 1)
			before := stateBytes(f)
			r := applyAt(f, 2, tc.cmd)
			if err, _ := r.(error); !errors.Is(err, ErrStopped) || !errors.Is(err, ErrNeedsUpgrade) {
				t.Fatalf("answered %v, want ErrStopped for ErrNeedsUpgrade", r)
			}
			for _, want := range tc.says {
				if !strings.Contains(f.Stopped().Error(), want) {
					t.Errorf("stopped with %q, which does not say %q", f.Stopped(), want)
				}
			}
			if len(fatal) != 1 || f.Applied() != 1 || f.ActiveVersion() != version.V1 {
				t.Fatalf("OnFatal told %v, applied %d, active %d", fatal, f.Applied(), f.ActiveVersion())
			}
			wantStateUnchanged(t, f, before)
		})
	}
}

// A state machine refuses to open, or to restore, a group at a Number past
// what it applies, with a message naming the versions (not "malformed").
func TestOpenRefusesANewerVersion(t *testing.T) {
	r := newGroupRig(t, func(c *Config) { c.Group = "g1" }).v2()
	r.send("s")
	takeSnapshot(t, r.f)
	stream := snapshotStream(t, r.f)
	cfg := r.f.cfg
	r.f.Close()
	old := cfg
	old.MaxVersion = version.V1
	_, err := Open(old)
	if !errors.Is(err, ErrNewerData) || errors.Is(err, ErrBadCheckpoint) ||
		!strings.Contains(err.Error(), "broker group g1's active version is 2") || !strings.Contains(err.Error(), "applies versions 1-1") ||
		!strings.Contains(err.Error(), "run a release that supports version 2") {
		t.Fatalf("Open of a group at 2 by a replica applying 1: %v", err)
	}
	target := unitFSM(t, func(c *Config) { c.Group, c.MaxVersion = "g1", version.V1 })
	if err := target.Restore(io.NopCloser(bytes.NewReader(stream))); !errors.Is(err, ErrNewerData) ||
		!strings.Contains(err.Error(), "active version is 2") {
		t.Fatalf("Restore of a group at 2 by a replica applying 1: %v", err)
	}
	if target.ActiveVersion() != version.V1 || target.Stopped() != nil {
		t.Fatal("the refused restore changed the replica")
	}
	// This build opens it.
	if f := unitOpen(t, cfg); f.ActiveVersion() != version.V2 {
		t.Fatalf("reopened at %d", f.ActiveVersion())
	}
}

// prevCheckSnapPath is checkSnapPath as the release before version gates
// (eb696dd) has it: a snapshot that lists any other path, timeline/ among
// them, is refused by a replica of that release.
func prevCheckSnapPath(rel string) error {
	parts := strings.Split(rel, "/")
	ok := path.Clean(rel) == rel && strings.HasSuffix(rel, ".seg")
	switch {
	case !ok:
	case len(parts) == 2 && (parts[0] == "messages" || parts[0] == "pull" || parts[0] == "journal"):
	case len(parts) == 3 && parts[0] == "schedule" && delaywheel.IsHourName(parts[1]):
	case len(parts) == 4 && parts[0] == "schedule" && delaywheel.IsHourName(parts[1]) && parts[2] == "dispatched":
	case len(parts) == 3 && parts[0] == "consume" && CheckName("subject", parts[1]) == nil:
	default:
		ok = false
	}
	for _, p := range parts {
		ok = ok && p != "" && p != "." && p != ".."
	}
	if !ok {
		return fmt.Errorf("file path %q", rel)
	}
	return nil
}

func TestPrevCheckSnapPath(t *testing.T) {
	for rel, ok := range map[string]bool{
		"messages/00000000000000000000.seg": true, "pull/0.seg": true, "journal/0.seg": true,
		"consume/orders/0.seg": true, "schedule/2026120214/0.seg": true, "schedule/2026120214/dispatched/0.seg": true,
		"timeline/0.seg": false, "timeline-index/0.idx": false, "consume/../x.seg": false, "messages/0.idx": false,
	} {
		if err := prevCheckSnapPath(rel); (err == nil) != ok {
			t.Errorf("%s: %v, want accepted %v", rel, err, ok)
		}
	}
}

// A group at V1 writes only what the release before version gates reads,
// whatever the commands it applies (an Append of version 3 and dead
// letters of version 2 replay from a log of before gates): no timeline
// record, checkpoints of version 5 at most (no stored bytes), and
// snapshots that list no path that release refuses. From SetVersion(2)
// on, the timeline and the stored bytes are recorded.
func TestV1WritesWhatTheReleaseBeforeReads(t *testing.T) {
	r := newGroupRig(t)
	timelineWorkload(t, r)
	f := r.f
	if end := f.store.timeline.End(); end != 0 {
		t.Fatalf("a group at V1 wrote %d bytes of timeline", end)
	}
	takeSnapshot(t, f)
	if v := checkpointFormat(t, f); v > 5 {
		t.Fatalf("a group at V1 wrote checkpoint version %d, want at most 5", v)
	}
	m := checkStream(t, snapshotStream(t, f))
	if m.Checkpoint[0] > 5 {
		t.Fatalf("a snapshot at V1 holds checkpoint version %d", m.Checkpoint[0])
	}
	if len(m.Files) < 4 {
		t.Fatalf("a snapshot of %d files", len(m.Files))
	}
	for _, file := range m.Files {
		if err := prevCheckSnapPath(file.Rel); err != nil {
			t.Errorf("the release before gates refuses the snapshot: %v", err)
		}
	}
	// Its stored bytes are counted at open, not checkpointed.
	want := storedBytes(t, f)
	cfg := f.cfg
	f.Close()
	r.f = unitOpen(t, cfg)
	if got := storedBytes(t, r.f); got["s"] == 0 || got["s"] != want["s"] {
		t.Fatalf("reopened storing %v, want %v", got, want)
	}

	r.v2()
	r.send("s")
	r.pullN("g", "c1", 5)
	if r.f.store.timeline.End() == 0 {
		t.Fatal("no timeline written at V2")
	}
	takeSnapshot(t, r.f)
	if v := checkpointFormat(t, r.f); v != 8 {
		t.Fatalf("checkpoint version %d at V2, want 8", v)
	}
	c, err := readCheckpoint(filepath.Join(r.f.cfg.Dir, dataDir))
	if err != nil || c.ends.consumeBytes["s"] == 0 || c.ends.timeline == 0 {
		t.Fatalf("the checkpoint at V2 records bytes %v and a timeline ending at %d (%v)", c.ends.consumeBytes, c.ends.timeline, err)
	}
	timelineListed := false
	for _, file := range checkStream(t, snapshotStream(t, r.f)).Files {
		timelineListed = timelineListed || strings.HasPrefix(file.Rel, timelineDir+"/")
	}
	if !timelineListed {
		t.Fatal("a snapshot at V2 lists no timeline")
	}
}

// The apply-side net: with a Number recorded, an entry needing a higher
// one is refused alike on every replica, changing nothing; with none
// recorded, nothing is refused, so that a log of before gates replays.
// (This build records 2 or more, and no command of its needs more than 2:
// the state below, recording 1, is one a checkpoint of version 8 may hold.)
func TestApplyRefusesEntriesPastTheActiveVersion(t *testing.T) {
	past := []encoder{
		&Append{Now: 1, Messages: []*message.Message{unitMsg("a", "s", 1)}, Apps: []Sender{{Addr: "10.0.0.1:1"}}, Senders: []int{1}},
		&DeadLetters{Now: 1, Subject: "s", ConsumerGroup: "g", Op: DeadPurge, All: true, By: "app:ops"},
	}
	var states [][]byte
	for range 2 {
		f := unitFSM(t)
		appendN(t, f, 1, "s", "m", 1)
		f.st.version = version.V1 // as a checkpoint of version 8 recording 1 opens
		takeSnapshot(t, f)
		cfg := f.cfg
		f.Close()
		f = unitOpen(t, cfg)
		if f.st.version != version.V1 || checkpointFormat(t, f) != 8 {
			t.Fatalf("reopened recording %d, checkpoint %d", f.st.version, checkpointFormat(t, f))
		}
		before := stateBytes(f)
		for i, cmd := range past {
			r := applyAt(f, uint64(2+i), cmd)
			wantInvalid(t, r)
			if !strings.Contains(r.(error).Error(), "needs version 2; the broker group is at version 1") {
				t.Fatalf("refused with %v", r)
			}
		}
		wantStateUnchanged(t, f, before)
		if f.Applied() != 3 || f.Stopped() != nil {
			t.Fatalf("applied %d, stopped %v", f.Applied(), f.Stopped())
		}
		states = append(states, stateBytes(f))
	}
	if !bytes.Equal(states[0], states[1]) {
		t.Fatal("the replicas differ")
	}
	// Nothing recorded: applied.
	f := unitFSM(t)
	if r := applyAt(f, 1, past[0]); resultAs[*AppendResult](t, r).Messages[0].Status != Appended {
		t.Fatalf("an Append of version 3 at no recorded Number: %s", describe(r))
	}
	if r := applyAt(f, 2, past[1]); describe(r) == "" {
		t.Fatal("no answer")
	} else if err, ok := r.(error); ok {
		t.Fatalf("dead letters of version 2 at no recorded Number: %v", err)
	}
}

// CommandNeeds is needOf of an encoded command's header; SetVersion
// needs nothing of the active Number (it raises it).
func TestCommandNeeds(t *testing.T) {
	for _, tc := range []struct {
		cmd  encoder
		want version.Number
	}{
		{&Append{Messages: []*message.Message{unitMsg("a", "s", 1)}}, version.V1},
		{&Append{Messages: []*message.Message{unitMsg("a", "s", 1)}, Apps: []Sender{{App: "orders"}}, Senders: []int{1}}, version.V1},
		{&Append{Messages: []*message.Message{unitMsg("a", "s", 1)}, Apps: []Sender{{App: "orders", Addr: "x:1"}}, Senders: []int{1}}, version.V2},
		{&DeadLetters{Subject: "s", ConsumerGroup: "g", Op: DeadPurge, All: true}, version.V1},
		{&DeadLetters{Subject: "s", ConsumerGroup: "g", Op: DeadPurge, All: true, By: "app:x"}, version.V2},
		{&Pull{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}, version.V1},
		{&SetVersion{Version: version.V2}, version.V1},
	} {
		if got := CommandNeeds(tc.cmd.Encode()); got != tc.want {
			t.Errorf("%T %x needs %d, want %d", tc.cmd, tc.cmd.Encode()[:2], got, tc.want)
		}
	}
	if _, err := Decode((&SetVersion{Version: 0}).Encode()); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("SetVersion(0) decodes: %v", err)
	}
	c, err := Decode((&SetVersion{Now: 5, Version: 7}).Encode())
	if sv, ok := c.(*SetVersion); err != nil || !ok || *sv != (SetVersion{Now: 5, Version: 7}) {
		t.Fatalf("SetVersion round trip: %#v, %v", c, err)
	}
}
