package delaywheel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

func openSchedule(t *testing.T, dir string, maxOpen int, known ...map[int64]HourEnds) *Schedule {
	t.Helper()
	var k map[int64]HourEnds
	if len(known) > 0 {
		k = known[0]
	}
	s, err := OpenSchedule(dir, maxOpen, k, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func msg(id string) *message.Message {
	return &message.Message{ID: id, Subject: "orders", CreatedAt: 1, Body: []byte("body of " + id)}
}

// pending loads an hour and returns its entries' refs by message id.
func pending(t *testing.T, s *Schedule, hour int64) map[string]Entry {
	t.Helper()
	out := map[string]Entry{}
	err := s.Load(hour, func(e Entry) error {
		_, m, err := s.Read(e.Ref)
		if err != nil {
			return err
		}
		out[m.ID] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestScheduleAppendReadDispatchRemove(t *testing.T) {
	s := openSchedule(t, t.TempDir(), 4)
	h := int64(493_000) // an hour in 2026
	at := h * HourMillis
	refs := map[string]uint64{}
	for i, id := range []string{"a", "b", "c"} {
		ref, err := s.Append(at+int64(i)*1000, msg(id))
		if err != nil {
			t.Fatal(err)
		}
		refs[id] = ref
	}
	// One due in the next hour goes to that hour's directory.
	next, err := s.Append(at+HourMillis+5, msg("d"))
	if err != nil {
		t.Fatal(err)
	}
	if hour, _ := SplitRef(next); hour != h+1 {
		t.Fatalf("entry due in hour %d stored in hour %d", h+1, hour)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	gotAt, m, err := s.Read(refs["b"])
	if err != nil || gotAt != at+1000 || m.ID != "b" || string(m.Body) != "body of b" {
		t.Fatalf("read b: at %d, %+v, %v", gotAt, m, err)
	}
	if err := s.Dispatch(refs["a"]); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	if p := pending(t, s, h); len(p) != 2 || p["b"].At != at+1000 || p["c"].Ref != refs["c"] {
		t.Fatalf("pending after dispatching a: %v", p)
	}
	hours := s.Hours()
	if len(hours) != 2 || hours[0] != h || hours[1] != h+1 {
		t.Fatalf("hours %v, want [%d %d]", hours, h, h+1)
	}
	if err := s.Remove(h); err != nil {
		t.Fatal(err)
	}
	if hours := s.Hours(); len(hours) != 1 || hours[0] != h+1 {
		t.Fatalf("hours after removing %d: %v", h, hours)
	}
	if p := pending(t, s, h); len(p) != 0 {
		t.Fatalf("a removed hour still has %d entries", len(p))
	}
}

// TestScheduleKeepsFewHoursOpen appends to many hours with at most 3 open:
// every entry survives the closing and reopening of its hour.
func TestScheduleKeepsFewHoursOpen(t *testing.T) {
	dir := t.TempDir()
	s := openSchedule(t, dir, 3)
	base := int64(493_000)
	for i := range 40 {
		hour := base + int64(i%10)*24 // ten hours a day apart, revisited
		if _, err := s.Append(hour*HourMillis+int64(i), msg(string(rune('A'+i)))); err != nil {
			t.Fatal(err)
		}
		if len(s.open) > 3 {
			t.Fatalf("%d hours open, at most 3 allowed", len(s.open))
		}
	}
	s.Close()
	s = openSchedule(t, dir, 3, knownEnds(s)) // every hour closed: its ends known
	total := 0
	for i := range 10 {
		total += len(pending(t, s, base+int64(i)*24))
	}
	if total != 40 {
		t.Fatalf("%d entries after reopening, want 40", total)
	}
}

// TestScheduleRecoversATornTail: a crash mid-append leaves a partial
// record after the last checkpoint; reopening cuts the hour back to the
// checkpoint's ends, and appending goes on from there.
func TestScheduleRecoversATornTail(t *testing.T) {
	dir := t.TempDir()
	s := openSchedule(t, dir, 4)
	h := int64(493_000)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := s.Append(h*HourMillis, msg(id)); err != nil {
			t.Fatal(err)
		}
		if id == "b" { // the checkpoint: a and b are durable
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkpoint, _ := s.Ends(h)
	s.Flush()
	if e, _ := s.Ends(h); e.Records <= checkpoint.Records {
		t.Fatalf("ends %v after c, checkpoint %v", e, checkpoint)
	}
	s.Close()
	tearLastRecord(t, filepath.Join(dir, HourName(h)))
	s = openSchedule(t, dir, 4, map[int64]HourEnds{h: checkpoint})
	p := pending(t, s, h)
	_, hasA := p["a"]
	_, hasB := p["b"]
	if len(p) != 2 || !hasA || !hasB {
		t.Fatalf("after a torn tail: %v, want a and b", p)
	}
	if _, err := s.Append(h*HourMillis, msg("d")); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	if p := pending(t, s, h); len(p) != 3 {
		t.Fatalf("after appending past the cut: %d entries, want 3", len(p))
	}
}

// TestScheduleOpenKeepsOnlyCheckpointedHours: an hour the checkpoint does
// not name was created after it (Raft replays its appends) and is removed;
// a record torn below a checkpoint's end is an error, not silently cut.
func TestScheduleOpenKeepsOnlyCheckpointedHours(t *testing.T) {
	dir := t.TempDir()
	s := openSchedule(t, dir, 4)
	h := int64(493_000)
	for _, hour := range []int64{h, h + 1} {
		for _, id := range []string{"a", "b"} {
			if _, err := s.Append(hour*HourMillis, msg(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	known := map[int64]HourEnds{h: knownEnds(s)[h]}
	s = openSchedule(t, dir, 4, known)
	if hours := s.Hours(); len(hours) != 1 || hours[0] != h {
		t.Fatalf("hours after open: %v, want only %d", hours, h)
	}
	if len(pending(t, s, h+1)) != 0 {
		t.Fatal("entries of an hour the checkpoint does not name")
	}
	s.Close()
	tearLastRecord(t, filepath.Join(dir, HourName(h)))
	s = openSchedule(t, dir, 4, known)
	err := s.Load(h, func(Entry) error { return nil })
	if !errors.Is(err, logs.ErrCorrupt) {
		t.Fatalf("a record torn below the checkpoint: %v, want ErrCorrupt", err)
	}
}

// tearLastRecord cuts 7 bytes off the newest segment in dir.
func tearLastRecord(t *testing.T, dir string) {
	t.Helper()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	sort.Strings(segs)
	last := segs[len(segs)-1]
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(last, fi.Size()-7); err != nil {
		t.Fatal(err)
	}
}

func TestRefsAndHourNames(t *testing.T) {
	for _, c := range []struct{ hour, off int64 }{{0, 0}, {493_000, 16}, {maxRefHour, maxRefOffset}} {
		if h, o := SplitRef(MakeRef(c.hour, c.off)); h != c.hour || o != c.off {
			t.Errorf("ref of (%d, %d) splits into (%d, %d)", c.hour, c.off, h, o)
		}
	}
	at := int64(1_795_831_200_000) // 2026-11-28T02:00:00Z
	if got := HourName(Hour(at + 59*60*1000)); got != "2026112802" {
		t.Errorf("hour name %s, want 2026112802", got)
	}
	if Hour(-1) != -1 {
		t.Errorf("Hour(-1) = %d, want -1", Hour(-1))
	}
}

// knownEnds returns the ends of every closed hour of s, as a checkpoint
// would record them.
func knownEnds(s *Schedule) map[int64]HourEnds {
	out := map[int64]HourEnds{}
	for hour, c := range s.closed {
		out[hour] = c.ends
	}
	return out
}

// FuzzDecodeRecord: any bytes decode to a record or to an error wrapping
// logs.ErrCorrupt, and a record re-encodes to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	good := appendRecord(nil, 96, 12345, "", msg("a"))
	f.Add(good)
	f.Add(good[:16])
	f.Add([]byte{})
	withApp := appendRecord(nil, 96, 12345, "billing", msg("a"))
	f.Add(withApp)
	f.Add(withApp[:18])
	f.Add(appendRecord(nil, 96, 12345, strings.Repeat("a", limits.MaxName), msg("a")))
	f.Add(appendRecord(nil, 96, 12345, strings.Repeat("a", limits.MaxName+1), msg("a")))
	f.Fuzz(func(t *testing.T, p []byte) {
		off, rec, err := decodeRecord(p)
		if err != nil {
			if !errors.Is(err, logs.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if len(rec.App) > limits.MaxName {
			t.Fatalf("an application code of %d bytes", len(rec.App))
		}
		if again := appendRecord(nil, off, rec.At, rec.App, rec.Message); !bytes.Equal(again, p) {
			t.Fatal("record does not re-encode to its bytes")
		}
	})
}

// TestRecordsKeepTheirApplication: a record written for an application
// reads back with it, one written without reads back without, side by
// side in an hour, and RecordSizeFor is where the next record starts.
func TestRecordsKeepTheirApplication(t *testing.T) {
	s := openSchedule(t, t.TempDir(), 4)
	at := int64(493_000) * HourMillis
	long := strings.Repeat("a", limits.MaxName)
	var refs []uint64
	for _, app := range []string{"billing", "", long} {
		m := msg("m-" + app[:min(len(app), 8)])
		ref, err := s.AppendFor(at+1, m, app)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, app := range []string{"billing", "", long} {
		rec, err := s.ReadRecord(refs[i])
		if err != nil || rec.App != app || rec.At != at+1 {
			t.Fatalf("record %d: %+v, %v; want application %q", i, rec, err, app)
		}
	}
	_, first := SplitRef(refs[0])
	_, second := SplitRef(refs[1])
	if got, want := second-first, RecordSizeFor(msg("m-billing"), "billing"); got != want {
		t.Fatalf("a record for an application takes %d bytes, RecordSizeFor says %d", got, want)
	}
}

// TestReadRefusesAReferenceInsideARecord: a message body shaped like a
// schedule record (length, checksum, payload) does not read as one when a
// reference points into it.
func TestReadRefusesAReferenceInsideARecord(t *testing.T) {
	s := openSchedule(t, t.TempDir(), 4)
	h := int64(493_000)
	forged := msg("forged")
	inner := appendRecord(nil, 0, h*HourMillis, "", forged)
	var frame []byte
	frame = binary.LittleEndian.AppendUint32(frame, uint32(len(inner)))
	frame = binary.LittleEndian.AppendUint32(frame, crc32.Checksum(inner, crc32.MakeTable(crc32.Castagnoli)))
	frame = append(frame, inner...)
	carrier := msg("carrier")
	carrier.Body = frame
	ref, err := s.Append(h*HourMillis+5, carrier)
	if err != nil {
		t.Fatal(err)
	}
	s.Flush()
	_, off := SplitRef(ref)
	p, _ := s.open[h].records.Read(off)
	at := bytes.Index(p, frame)
	if at < 0 {
		t.Fatal("the body is not in the record")
	}
	inside := MakeRef(h, off+8+int64(at)) // 8: the record's own header
	if _, m, err := s.Read(inside); !errors.Is(err, logs.ErrCorrupt) {
		t.Fatalf("a reference inside a record read %+v, %v; want ErrCorrupt", m, err)
	}
	if _, m, err := s.Read(ref); err != nil || m.ID != "carrier" {
		t.Fatalf("the record itself: %+v, %v", m, err)
	}
}
