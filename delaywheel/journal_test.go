package delaywheel

import (
	"testing"

	"github.com/qmqgo/qmq/logs"
)

func openJournal(t *testing.T, dir string) *Journal {
	t.Helper()
	j, err := OpenJournal(dir, logs.Options{SegmentSize: 64 * journalRecord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Log().Close() })
	return j
}

func since(t *testing.T, j *Journal, at int64) []JournalEntry {
	t.Helper()
	var out []JournalEntry
	if err := j.Since(at, func(e JournalEntry) error { out = append(out, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestJournalSinceAndRemoveBefore: entries come back from the first one
// appended at or after a time, and old segments go without taking any
// entry of the window with them.
func TestJournalSinceAndRemoveBefore(t *testing.T) {
	j := openJournal(t, t.TempDir())
	for i := range 1000 {
		at := int64(1000 + i/3*10) // three entries per time step, as one batch shares its time
		if err := j.Append(JournalEntry{AppendedAt: at, Hash: uint64(i), Ref: uint64(i) * 7}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	got := since(t, j, 2000) // the first entry at 2000 is number 300
	if len(got) != 700 || got[0].Hash != 300 || got[0].Ref != 2100 || got[0].AppendedAt != 2000 {
		t.Fatalf("since 2000: %d entries, first %+v; want 700 from entry 300", len(got), got[0])
	}
	if got := since(t, j, 1_000_000); len(got) != 0 {
		t.Fatalf("since the future: %d entries", len(got))
	}
	if got := since(t, j, 0); len(got) != 1000 {
		t.Fatalf("since the start: %d entries, want 1000", len(got))
	}
	segsBefore := len(j.Log().Segments())
	if err := j.RemoveBefore(2000); err != nil {
		t.Fatal(err)
	}
	if len(j.Log().Segments()) >= segsBefore {
		t.Fatalf("no segment removed (%d before, %d after)", segsBefore, len(j.Log().Segments()))
	}
	if got := since(t, j, 2000); len(got) != 700 || got[0].Hash != 300 {
		t.Fatal("removing old segments lost entries of the window")
	}
}

// TestJournalSurvivesReopen: a closed journal reopens with every entry.
func TestJournalSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	j, err := OpenJournal(dir, logs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		j.Append(JournalEntry{AppendedAt: int64(i), Hash: uint64(i), Ref: uint64(i)})
	}
	if err := j.Log().Sync(); err != nil {
		t.Fatal(err)
	}
	j.Log().Close()
	j = openJournal(t, dir)
	if got := since(t, j, 5); len(got) != 5 || got[0].Hash != 5 {
		t.Fatalf("after reopening: %v", got)
	}
}
