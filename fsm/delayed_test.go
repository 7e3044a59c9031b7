package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/snapshot"
	"github.com/qmqgo/qmq/internal/message"
)

// Times in these tests: 2026-11-30 10:00 UTC, and the hours around it.
const (
	unitHour = int64(498_898) // hours since the epoch
	unitNow  = unitHour * delaywheel.HourMillis
)

func delayedMsg(id, subject string, at int64) *message.Message {
	m := unitMsg(id, subject, 8)
	m.DeliverAt = at
	return m
}

func fireAt(tb testing.TB, f *FSM, index uint64, now int64, refs ...uint64) *FireResult {
	tb.Helper()
	return resultAs[*FireResult](tb, applyAt(f, index, &Fire{Now: now, Refs: refs}))
}

// TestDelayedMessageWaitsForItsFire: a delayed message is stored in the
// schedule, not the subject, until a Fire at or after its due time moves
// it; a Fire before it is due, or a second Fire, changes nothing.
func TestDelayedMessageWaitsForItsFire(t *testing.T) {
	f := unitFSM(t)
	due := unitNow + 5000
	res := appendAt(t, f, 1, unitNow, unitMsg("now", "s", 8), delayedMsg("later", "s", due))
	if res.Messages[0].Status != Appended || res.Messages[1].Status != Scheduled || res.Messages[1].At != due {
		t.Fatalf("results %+v, want appended then scheduled", res.Messages)
	}
	ref := res.Messages[1].Ref
	if got := messagesOf(t, f, "s"); len(got) != 1 {
		t.Fatalf("subject holds %d messages before the fire, want 1", len(got))
	}
	if d := f.Delays(); d.Pending != 1 || d.Subjects["s"] != 1 || len(d.Hours) != 1 || d.Hours[0].Hour != unitHour {
		t.Fatalf("delay stats %+v", d)
	}

	appendAt(t, f, 2, due-1) // the clock moves; then a fire at that time changes nothing
	before := stateBytes(f)
	if r := fireAt(t, f, 3, due-1, ref); r.Fired != 0 || r.Passed != 1 {
		t.Fatalf("a fire 1 ms early: %+v", r)
	}
	wantStateUnchanged(t, f, before)

	if r := fireAt(t, f, 4, due+20, ref); r.Fired != 1 || !slices.Equal(r.Subjects, []string{"s"}) {
		t.Fatalf("the fire at its time: %+v", r)
	}
	m, err := f.Message("s", 1)
	if err != nil || m.ID != "later" || m.DeliverAt != due || m.AppendedAt != due+20 || m.Index != 4 {
		t.Fatalf("fired message %+v, %v", m, err)
	}
	if d := f.Delays(); d.Pending != 0 || len(d.Subjects) != 0 {
		t.Fatalf("delay stats after the fire: %+v", d)
	}
	appendAt(t, f, 5, due+30)
	before = stateBytes(f)
	if r := fireAt(t, f, 6, due+30, ref); r.Fired != 0 || r.Passed != 1 {
		t.Fatalf("a second fire of the same entry: %+v", r)
	}
	wantStateUnchanged(t, f, before)
	if got := messagesOf(t, f, "s"); len(got) != 2 {
		t.Fatalf("subject holds %d messages, want 2", len(got))
	}
}

// TestPastDeliveryTimeIsDeliveredAtOnce: a delivery time at or before the
// leader's time is an ordinary message.
func TestPastDeliveryTimeIsDeliveredAtOnce(t *testing.T) {
	f := unitFSM(t)
	res := appendAt(t, f, 1, unitNow, delayedMsg("past", "s", unitNow-60_000), delayedMsg("now", "s", unitNow))
	for i, r := range res.Messages {
		if r.Status != Appended {
			t.Fatalf("message %d: %+v, want appended", i, r)
		}
	}
	if m, err := f.Message("s", 0); err != nil || m.DeliverAt != 0 {
		t.Fatalf("message %+v, %v", m, err)
	}
	if d := f.Delays(); d.Pending != 0 {
		t.Fatalf("%d pending", d.Pending)
	}
}

// TestFireIgnoresWhatItCannotFire: references to no record (an unknown
// hour, the middle of a record, past the end) pass without a change.
func TestFireIgnoresWhatItCannotFire(t *testing.T) {
	f := unitFSM(t)
	res := appendAt(t, f, 1, unitNow, delayedMsg("a", "s", unitNow+1000))
	ref := res.Messages[0].Ref
	before := stateBytes(f)
	r := fireAt(t, f, 2, unitNow, delaywheel.MakeRef(unitHour+7, 0), ref+3, ref+1<<20, ^uint64(0))
	if r.Fired != 0 || r.Passed != 4 {
		t.Fatalf("fire of bogus refs: %+v", r)
	}
	wantStateUnchanged(t, f, before)
}

// TestWorkloadExercisesDelays: the shared workload, which the restart,
// snapshot and replica tests replay, schedules, fires, refires and
// deduplicates delayed messages, and leaves some pending an hour ahead.
func TestWorkloadExercisesDelays(t *testing.T) {
	f := unitFSM(t)
	var scheduled, dupDelayed, fired, passed int
	for _, e := range unitWorkload(150, 10) {
		switch r := f.Apply(e).(type) {
		case *AppendResult:
			for _, m := range r.Messages {
				switch {
				case m.Status == Scheduled:
					scheduled++
				case m.Status == Duplicate && m.Offset == -1:
					dupDelayed++
				}
			}
		case *FireResult:
			fired += r.Fired
			passed += r.Passed
		}
	}
	d := f.Delays()
	if scheduled < 40 || dupDelayed < 20 || fired < 20 || passed < 20 || d.Pending == 0 || len(d.Hours) < 2 {
		t.Fatalf("scheduled %d, duplicates %d, fired %d, passed %d, pending %+v", scheduled, dupDelayed, fired, passed, d)
	}
	if int(d.Pending)+fired != scheduled {
		t.Fatalf("%d pending + %d fired != %d scheduled", d.Pending, fired, scheduled)
	}
}

// TestDelayedDedupSurvivesRestart: the ids of delayed messages stay in the
// dedup window across a restart (rebuilt from the journal), fired or not,
// and leave it when the window passes.
func TestDelayedDedupSurvivesRestart(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	res := appendAt(t, f, 1, unitNow, delayedMsg("a", "s", unitNow+1000), delayedMsg("b", "s", unitNow+2*delaywheel.HourMillis))
	fireAt(t, f, 2, unitNow+1000, res.Messages[0].Ref)
	takeSnapshot(t, f)
	appendAt(t, f, 3, unitNow+2000, delayedMsg("c", "s", unitNow+5000))
	f.Close()

	g := unitOpen(t, cfg)
	appendAt(t, g, 3, unitNow+2000, delayedMsg("c", "s", unitNow+5000)) // Raft's replay
	res = appendAt(t, g, 4, unitNow+3000, delayedMsg("a", "s", unitNow+9000), unitMsg("b", "s", 1), delayedMsg("c", "s", unitNow+9000))
	for i, r := range res.Messages {
		if r.Status != Duplicate {
			t.Fatalf("message %d after restart: %+v, want duplicate", i, r)
		}
	}
	window := cfg.DedupWindow.Milliseconds()
	res = appendAt(t, g, 5, unitNow+window+1, delayedMsg("a", "s", unitNow+window+9000))
	if res.Messages[0].Status != Scheduled {
		t.Fatalf("past the window: %+v, want scheduled", res.Messages[0])
	}
}

// TestEmptiedHoursAreRemoved: once every entry of an hour was fired and
// the hour (and the dedup window after it) has passed, the hour leaves the
// state, and its directory goes once the next checkpoint is written (at
// the first apply after it: a snapshot's checkpoint is written off the
// apply goroutine). A late Fire of one of its entries changes nothing.
func TestEmptiedHoursAreRemoved(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	res := appendAt(t, f, 1, unitNow, delayedMsg("a", "s", unitNow+1000), delayedMsg("later", "s", unitNow+3*delaywheel.HourMillis))
	ref := res.Messages[0].Ref
	fireAt(t, f, 2, unitNow+1000, ref)
	hourDir := filepath.Join(cfg.Dir, dataDir, scheduleDir, delaywheel.HourName(unitHour))
	takeSnapshot(t, f)
	if _, err := os.Stat(hourDir); err != nil {
		t.Fatalf("hour removed before its dedup window passed: %v", err)
	}
	// The clock enters hour+2: the hour and its window are over.
	appendAt(t, f, 3, unitNow+2*delaywheel.HourMillis, unitMsg("tick", "s", 1))
	if d := f.Delays(); len(d.Hours) != 1 || d.Hours[0].Hour != unitHour+3 {
		t.Fatalf("hours after the sweep: %+v", d.Hours)
	}
	if _, err := os.Stat(hourDir); err != nil {
		t.Fatalf("hour removed before a checkpoint stopped naming it: %v", err)
	}
	takeSnapshot(t, f)
	if _, err := os.Stat(hourDir); err != nil {
		t.Fatalf("hour removed before the apply goroutine learnt of the checkpoint: %v", err)
	}
	appendAt(t, f, 4, unitNow+2*delaywheel.HourMillis, unitMsg("tock", "s", 1))
	if _, err := os.Stat(hourDir); !os.IsNotExist(err) {
		t.Fatalf("emptied hour still on disk after the checkpoint: %v", err)
	}
	before := stateBytes(f)
	if r := fireAt(t, f, 5, unitNow+2*delaywheel.HourMillis, ref); r.Fired != 0 || r.Passed != 1 {
		t.Fatalf("a late fire of a removed hour's entry: %+v", r)
	}
	wantStateUnchanged(t, f, before)
}

// TestScheduleHoursOpenLazily: a schedule spread over two years of hours
// opens none of them on start, and each fires when due.
func TestScheduleHoursOpenLazily(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	var msgs []*message.Message
	for i := range 200 {
		msgs = append(msgs, delayedMsg("m"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26)), "s",
			unitNow+int64(i)*87*delaywheel.HourMillis+1)) // 200 hours over two years
	}
	res := appendAt(t, f, 1, unitNow, msgs...)
	takeSnapshot(t, f)
	f.Close()
	g := unitOpen(t, cfg)
	if n := len(g.store.sched.Hours()); n != 200 {
		t.Fatalf("%d hours on disk, want 200", n)
	}
	if n := g.store.sched.OpenHours(); n != 0 {
		t.Fatalf("%d hours opened on start, want 0", n)
	}
	last := res.Messages[199]
	if r := fireAt(t, g, 2, last.At, last.Ref); r.Fired != 1 {
		t.Fatalf("the entry due in two years: %+v", r)
	}
	if g.store.sched.OpenHours() != 1 {
		t.Fatalf("%d hours open after one fire", g.store.sched.OpenHours())
	}
}

// TestTornScheduleTailRecovers: a crash that tears the schedule's newest
// record after a checkpoint loses nothing: the hour is cut back to the
// checkpoint and Raft's replay writes the record again.
func TestTornScheduleTailRecovers(t *testing.T) {
	cfg := unitConfig(t.TempDir())
	f := unitOpen(t, cfg)
	appendAt(t, f, 1, unitNow, delayedMsg("a", "s", unitNow+1000))
	takeSnapshot(t, f)
	after := &Append{Now: unitNow + 10, Messages: []*message.Message{delayedMsg("b", "s", unitNow+1000)}}
	res := resultAs[*AppendResult](t, applyAt(f, 2, after))
	f.Close()
	segs, _ := filepath.Glob(filepath.Join(cfg.Dir, dataDir, scheduleDir, delaywheel.HourName(unitHour), "*.seg"))
	slices.Sort(segs)
	fi, _ := os.Stat(segs[len(segs)-1])
	if err := os.Truncate(segs[len(segs)-1], fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	g := unitOpen(t, cfg)
	again := resultAs[*AppendResult](t, applyAt(g, 2, after)) // Raft's replay
	if again.Messages[0] != res.Messages[0] {
		t.Fatalf("replayed append %+v, first time %+v", again.Messages[0], res.Messages[0])
	}
	r := fireAt(t, g, 3, unitNow+1000, delaywheel.MakeRef(unitHour, 0), res.Messages[0].Ref)
	if r.Fired != 2 {
		t.Fatalf("fired %+v, want both", r)
	}
	if got := messagesOf(t, g, "s"); len(got) != 2 {
		t.Fatalf("subject holds %v", got)
	}
}

// FuzzFire: a Fire naming arbitrary references never panics, fires only
// scheduled entries that are due, each at most once, and keeps the pending
// counts equal to what was scheduled less what was fired.
func FuzzFire(f *testing.F) {
	f.Add([]byte{}, int64(0))
	f.Add(binary.LittleEndian.AppendUint64(nil, delaywheel.MakeRef(unitHour, 0)), int64(2000))
	f.Add(binary.LittleEndian.AppendUint64(nil, delaywheel.MakeRef(unitHour, 9)), int64(5000))
	f.Add(binary.LittleEndian.AppendUint64(nil, ^uint64(0)), int64(-1))
	f.Fuzz(func(t *testing.T, raw []byte, after int64) {
		g := unitFSM(t)
		var msgs []*message.Message
		for i := range 5 {
			msgs = append(msgs, delayedMsg(fmt.Sprint("m", i), "s", unitNow+int64(i)*1000+1))
		}
		res := appendAt(t, g, 1, unitNow, msgs...)
		refs := []uint64{res.Messages[0].Ref, res.Messages[4].Ref}
		for len(raw) >= 8 {
			refs = append(refs, binary.LittleEndian.Uint64(raw))
			raw = raw[8:]
		}
		now := unitNow + after%(10*delaywheel.HourMillis)
		r := fireAt(t, g, 2, now, refs...)
		again := fireAt(t, g, 3, now, refs...)
		due := 0
		for _, m := range msgs {
			if m.DeliverAt <= now {
				due++
			}
		}
		if r.Fired > due || again.Fired != 0 || r.Fired+r.Passed != len(refs) {
			t.Fatalf("fired %+v then %+v of %d refs, %d due", r, again, len(refs), due)
		}
		if d := g.Delays(); d.Pending != int64(5-r.Fired) || int64(len(messagesOf(t, g, "s"))) != int64(r.Fired) {
			t.Fatalf("after firing %d: %+v pending, subject holds %d", r.Fired, d, len(messagesOf(t, g, "s")))
		}
	})
}

// TestScheduleFollowsTheProposersClock: a leader whose clock is behind the
// state's (an earlier leader's ran ahead) still schedules what is due after
// its own time, and fires it by its own clock. Only a time a whole dedup
// window behind the state's clock is delivered at once: its hour may have
// been swept already.
func TestScheduleFollowsTheProposersClock(t *testing.T) {
	f := unitFSM(t)
	window := f.cfg.DedupWindow.Milliseconds()
	appendAt(t, f, 1, unitNow+30_000, unitMsg("fast", "s", 1)) // the state's clock: 30 s ahead
	res := appendAt(t, f, 2, unitNow, delayedMsg("due-in-10s", "s", unitNow+10_000))
	if res.Messages[0].Status != Scheduled {
		t.Fatalf("result %+v, want scheduled", res.Messages[0])
	}
	if r := fireAt(t, f, 3, unitNow+9_999, res.Messages[0].Ref); r.Fired != 0 {
		t.Fatalf("fired by a clock 1 ms before its time: %+v", r)
	}
	if r := fireAt(t, f, 4, unitNow+10_000, res.Messages[0].Ref); r.Fired != 1 {
		t.Fatalf("not fired at its time: %+v", r)
	}
	appendAt(t, f, 5, unitNow+2*window, unitMsg("faster", "s", 1)) // now a whole window ahead
	res = appendAt(t, f, 6, unitNow+20_000, delayedMsg("behind-the-window", "s", unitNow+25_000))
	if res.Messages[0].Status != Appended {
		t.Fatalf("a time a window behind the state's clock: %+v, want appended", res.Messages[0])
	}
}

// TestRestoreRefusesMissingScheduleFiles: a snapshot whose checkpoint names
// a schedule hour it carries no files for is refused, and the state stays
// as it was (it used to be accepted, and the first use of the hour then
// stopped the node on every start).
func TestRestoreRefusesMissingScheduleFiles(t *testing.T) {
	src := unitFSM(t)
	appendAt(t, src, 1, unitNow, delayedMsg("a", "s", unitNow+5000))
	files := map[string][]byte{}
	m, err := readStream(bytes.NewReader(snapshotStream(t, src)), func(rel string) (io.WriteCloser, error) {
		return &captureFile{rel: rel, files: files}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kept := m.Files[:0]
	for _, file := range m.Files {
		if !strings.HasPrefix(file.Rel, scheduleDir+"/") {
			kept = append(kept, file)
		}
	}
	if len(kept) == len(m.Files) {
		t.Fatal("the snapshot carries no schedule files")
	}
	m.Files = kept
	var stream bytes.Buffer
	err = snapshot.Write(&stream, m, func(rel string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(files[rel])), nil })
	if err != nil {
		t.Fatal(err)
	}
	g := unitFSM(t)
	appendAt(t, g, 1, unitNow, unitMsg("mine", "own", 1))
	before := stateBytes(g)
	if err := g.Restore(io.NopCloser(&stream)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("Restore without the schedule's files: %v, want ErrBadSnapshot", err)
	}
	wantStateUnchanged(t, g, before)
}

// captureFile keeps what a snapshot stream writes for one file.
type captureFile struct {
	bytes.Buffer
	rel   string
	files map[string][]byte
}

func (c *captureFile) Close() error { c.files[c.rel] = c.Bytes(); return nil }
