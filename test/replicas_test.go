package test

import (
	"encoding/binary"
	"strings"
	"testing"
)

// segment builds a segment file holding records of the given payload sizes.
func segment(sizes ...int) []byte {
	b := make([]byte, 16)
	for _, n := range sizes {
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
		b = binary.LittleEndian.AppendUint32(b, 0)
		b = append(b, make([]byte, n)...)
	}
	return b
}

// The replica comparison covers the schedule: an hour every node holds is
// compared byte for byte; one some nodes removed (every node removes a
// wholly delivered hour at its own checkpoints) must be wholly delivered
// where it remains.
func TestSameFilesComparesTheSchedule(t *testing.T) {
	records, dispatched := segment(40, 50), segment(8, 8)
	base := func() map[string][]byte {
		return map[string][]byte{
			"messages/00000000000000000000.seg":                       segment(10),
			"schedule/2026113014/00000000000000000000.seg":            records,
			"schedule/2026113014/dispatched/00000000000000000000.seg": dispatched,
		}
	}
	for _, tc := range []struct {
		name string
		b    func(map[string][]byte)
		want string // "" for no difference
	}{
		{"identical", func(map[string][]byte) {}, ""},
		{"a delivered hour removed on one node", func(m map[string][]byte) {
			delete(m, "schedule/2026113014/00000000000000000000.seg")
			delete(m, "schedule/2026113014/dispatched/00000000000000000000.seg")
		}, ""},
		{"a schedule file differs", func(m map[string][]byte) {
			m["schedule/2026113014/00000000000000000000.seg"] = segment(40, 51)
		}, "differs"},
		{"an hour with pending messages missing on one node", func(m map[string][]byte) {
			m["schedule/2026113015/00000000000000000000.seg"] = segment(40)
		}, "delivered"},
		{"a message log differs", func(m map[string][]byte) {
			m["messages/00000000000000000000.seg"] = segment(11)
		}, "differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.b(b)
			err := sameFiles(map[string]map[string][]byte{"a": a, "b": b})
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("sameFiles = %v, want %q", err, tc.want)
			}
		})
	}
}

// The replica comparison covers the journal: each node drops its oldest
// segments at its own checkpoints, so one may hold older segments than
// another, never a newer one the other lacks nor a gap; the segments both
// hold are compared byte for byte.
func TestSameFilesComparesTheJournal(t *testing.T) {
	const j0, j1, j2 = "journal/00000000000000000000.seg", "journal/00000000000001048576.seg", "journal/00000000000002097152.seg"
	base := func() map[string][]byte {
		return map[string][]byte{j0: segment(10), j1: segment(20), j2: segment(30)}
	}
	for _, tc := range []struct {
		name string
		b    func(map[string][]byte)
		want string // "" for no difference
	}{
		{"identical", func(map[string][]byte) {}, ""},
		{"the oldest dropped on one node", func(m map[string][]byte) { delete(m, j0) }, ""},
		{"the two oldest dropped on one node", func(m map[string][]byte) { delete(m, j0); delete(m, j1) }, ""},
		{"a gap", func(m map[string][]byte) { delete(m, j1) }, "lacks " + j1},
		{"the newest missing", func(m map[string][]byte) { delete(m, j2) }, "lacks " + j2},
		{"a segment both hold differs", func(m map[string][]byte) { delete(m, j0); m[j1] = segment(21) }, "differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.b(b)
			err := sameFiles(map[string]map[string][]byte{"a": a, "b": b})
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("sameFiles = %v, want %q", err, tc.want)
			}
		})
	}
}
