package logs

import (
	"encoding/binary"
	"fmt"
)

// PullEntry records that one consume-log sequence was handed to one
// consumer as that consumer's pull sequence PullSeq.
//
// Encoding (24 bytes, little-endian):
//
//	consumer u32 | reserved u32 | pull-seq u64 | consume-seq u64
type PullEntry struct {
	Consumer   uint32 // the consumer's number, assigned by the state machine
	PullSeq    int64
	ConsumeSeq int64
}

const pullEntrySize = 24

// PullRecordSize is the on-disk size of one pull-log entry.
const PullRecordSize = recordHeader + pullEntrySize

// PullLog stores the pull logs of every consumer of a broker in one log of
// fixed-size entries, each naming its consumer: 10,000 consumers are one
// open file, not 10,000. A consumer's own pull log is the subsequence of
// entries with its number; the state machine keeps each consumer's unacked
// part in memory, so the hot path never searches this file.
type PullLog struct {
	log *Log
}

// OpenPullLog opens (or creates) the pull log in dir.
func OpenPullLog(dir string, opts Options) (*PullLog, error) {
	opts.FixedPayload = pullEntrySize
	opts.SegmentSize = roundToRecords(opts.SegmentSize, PullRecordSize)
	l, err := Open(dir, KindPull, opts)
	if err != nil {
		return nil, err
	}
	if l.Start()%PullRecordSize != 0 {
		l.Close()
		return nil, fmt.Errorf("%w: %s starts at offset %d, not an entry boundary", ErrCorrupt, dir, l.Start())
	}
	return &PullLog{log: l}, nil
}

// Log returns the underlying log.
func (p *PullLog) Log() *Log { return p.log }

// Append adds e and returns its position in the merged log.
func (p *PullLog) Append(e PullEntry) (int64, error) {
	var b [pullEntrySize]byte
	binary.LittleEndian.PutUint32(b[0:], e.Consumer)
	binary.LittleEndian.PutUint64(b[8:], uint64(e.PullSeq))
	binary.LittleEndian.PutUint64(b[16:], uint64(e.ConsumeSeq))
	off, err := p.log.Append(b[:])
	if err != nil {
		return 0, err
	}
	return off / PullRecordSize, nil
}

func decodePullEntry(b []byte) PullEntry {
	return PullEntry{
		Consumer:   binary.LittleEndian.Uint32(b[0:]),
		PullSeq:    int64(binary.LittleEndian.Uint64(b[8:])),
		ConsumeSeq: int64(binary.LittleEndian.Uint64(b[16:])),
	}
}

// Get returns the entry at position n of the merged log.
func (p *PullLog) Get(n int64) (PullEntry, error) {
	b, err := p.log.ReadSized(n*PullRecordSize, PullRecordSize)
	if err != nil {
		return PullEntry{}, err
	}
	return decodePullEntry(b), nil
}

// Scan calls fn with each entry from position from to the end, in order.
func (p *PullLog) Scan(from int64, fn func(n int64, e PullEntry) error) error {
	return p.log.Scan(from*PullRecordSize, func(off int64, b []byte) error {
		return fn(off/PullRecordSize, decodePullEntry(b))
	})
}

// ConsumerLog returns consumer's pull log from its pull sequence from on:
// the consume-log sequences handed to it, in pull-sequence order. It scans
// the merged log from position start; tools and tests use it, not the hot
// path.
func (p *PullLog) ConsumerLog(consumer uint32, start int64, from int64) ([]int64, error) {
	var seqs []int64
	err := p.Scan(start, func(_ int64, e PullEntry) error {
		if e.Consumer == consumer && e.PullSeq >= from {
			seqs = append(seqs, e.ConsumeSeq)
		}
		return nil
	})
	return seqs, err
}
