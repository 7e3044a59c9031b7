package delaywheel

import (
	"encoding/binary"
	"sort"

	"github.com/qmqgo/qmq/logs"
)

// Journal records every delayed append in the order applied: its append
// time, its id's hash and its reference. Delayed messages are not in the
// message log, from which the state machine rebuilds its dedup window on
// open; the journal gives that window back for them without reading the
// schedule. Records are fixed-size, in append-time order (leader-stamped
// time never goes back), so the first record of a window is found by
// binary search.
type Journal struct {
	log *logs.Log
}

// JournalEntry is one delayed append.
type JournalEntry struct {
	AppendedAt int64  // leader-stamped, Unix milliseconds
	Hash       uint64 // the message id's hash, as the dedup window keeps it
	Ref        uint64 // where the message lies in the schedule log
}

const journalPayload = 24

// OpenJournal opens (or creates) the journal in dir; opts.DurableEnd and
// SegmentSize apply as for any log, FixedPayload is set here.
func OpenJournal(dir string, opts logs.Options) (*Journal, error) {
	opts.FixedPayload = journalPayload
	l, err := logs.Open(dir, logs.KindJournal, opts)
	if err != nil {
		return nil, err
	}
	return &Journal{log: l}, nil
}

// Log returns the underlying log, for ends, truncation, snapshots and
// closing.
func (j *Journal) Log() *logs.Log { return j.log }

// Append records a delayed append; it is readable after the log's Flush.
func (j *Journal) Append(e JournalEntry) error {
	var p [journalPayload]byte
	binary.LittleEndian.PutUint64(p[0:], uint64(e.AppendedAt))
	binary.LittleEndian.PutUint64(p[8:], e.Hash)
	binary.LittleEndian.PutUint64(p[16:], e.Ref)
	_, err := j.log.Append(p[:])
	return err
}

// JournalRecordSize is a journal record's size, header and payload: the
// journal's ends are multiples of it.
const JournalRecordSize = 8 + journalPayload

const journalRecord = JournalRecordSize

func decodeJournal(p []byte) JournalEntry {
	return JournalEntry{
		AppendedAt: int64(binary.LittleEndian.Uint64(p[0:])),
		Hash:       binary.LittleEndian.Uint64(p[8:]),
		Ref:        binary.LittleEndian.Uint64(p[16:]),
	}
}

// firstAt returns the offset of the first entry appended at or after t, or
// the log's end if there is none.
func (j *Journal) firstAt(t int64) (int64, error) {
	first, end := j.log.Start()/journalRecord, j.log.End()/journalRecord
	var readErr error
	i := sort.Search(int(end-first), func(i int) bool {
		p, err := j.log.ReadSized((first+int64(i))*journalRecord, journalRecord)
		if err != nil {
			readErr = err
			return true
		}
		return decodeJournal(p).AppendedAt >= t
	})
	return (first + int64(i)) * journalRecord, readErr
}

// Since calls fn with every entry appended at or after t, in order.
func (j *Journal) Since(t int64, fn func(JournalEntry) error) error {
	from, err := j.firstAt(t)
	if err != nil || from >= j.log.End() {
		return err
	}
	return j.log.Scan(from, func(_ int64, p []byte) error { return fn(decodeJournal(p)) })
}

// RemoveBefore drops the sealed segments whose entries were all appended
// before t: they are outside any dedup window that starts at t.
func (j *Journal) RemoveBefore(t int64) error {
	keep, err := j.firstAt(t)
	if err != nil {
		return err
	}
	_, err = j.log.RemoveBefore(keep)
	return err
}
