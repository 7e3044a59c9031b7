package logs

import (
	"encoding/binary"
	"fmt"
)

// ConsumeEntry is one entry of a subject's consume log: where its message
// lies in the message log. Its sequence number is the subject's sequence.
//
// Encoding (32 bytes, little-endian):
//
//	offset u64 | size u32 | reserved u32 | appended-at i64 | tag-mask u64
type ConsumeEntry struct {
	Offset     int64  // message-log offset
	Size       int    // message-log record size
	AppendedAt int64  // Unix milliseconds
	TagMask    uint64 // see message.TagMask
}

const consumeEntrySize = 32

// ConsumeRecordSize is the on-disk size of one consume-log entry.
const ConsumeRecordSize = recordHeader + consumeEntrySize

// ConsumeLog is one subject's consume log: fixed-size entries, so an entry
// is found by sequence with one read.
type ConsumeLog struct {
	log *Log
}

// OpenConsumeLog opens (or creates) the consume log in dir.
func OpenConsumeLog(dir string, opts Options) (*ConsumeLog, error) {
	opts.FixedPayload = consumeEntrySize
	opts.SegmentSize = roundToRecords(opts.SegmentSize, ConsumeRecordSize)
	l, err := Open(dir, KindConsume, opts)
	if err != nil {
		return nil, err
	}
	if l.Start()%ConsumeRecordSize != 0 {
		l.Close()
		return nil, fmt.Errorf("%w: %s starts at offset %d, not an entry boundary", ErrCorrupt, dir, l.Start())
	}
	return &ConsumeLog{log: l}, nil
}

// roundToRecords rounds a segment size down to whole records (at least one).
func roundToRecords(segmentSize int64, record int) int64 {
	if segmentSize <= 0 {
		segmentSize = Options{}.withDefaults().SegmentSize
	}
	return max(segmentSize/int64(record), 1) * int64(record)
}

// Log returns the underlying log.
func (c *ConsumeLog) Log() *Log { return c.log }

// Append adds e and returns its sequence.
func (c *ConsumeLog) Append(e ConsumeEntry) (int64, error) {
	var p [consumeEntrySize]byte
	binary.LittleEndian.PutUint64(p[0:], uint64(e.Offset))
	binary.LittleEndian.PutUint32(p[8:], uint32(e.Size))
	binary.LittleEndian.PutUint64(p[16:], uint64(e.AppendedAt))
	binary.LittleEndian.PutUint64(p[24:], e.TagMask)
	off, err := c.log.Append(p[:])
	if err != nil {
		return 0, err
	}
	return off / ConsumeRecordSize, nil
}

// Get returns the entry with sequence seq.
func (c *ConsumeLog) Get(seq int64) (ConsumeEntry, error) {
	p, err := c.log.ReadSized(seq*ConsumeRecordSize, ConsumeRecordSize)
	if err != nil {
		return ConsumeEntry{}, err
	}
	return decodeConsumeEntry(p), nil
}

// GetRange returns the n entries from sequence seq on, read at once.
func (c *ConsumeLog) GetRange(seq int64, n int) ([]ConsumeEntry, error) {
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = ConsumeRecordSize
	}
	ps, err := c.log.ReadRun(seq*ConsumeRecordSize, sizes)
	if err != nil {
		return nil, err
	}
	out := make([]ConsumeEntry, len(ps))
	for i, p := range ps {
		out[i] = decodeConsumeEntry(p)
	}
	return out, nil
}

func decodeConsumeEntry(p []byte) ConsumeEntry {
	return ConsumeEntry{
		Offset:     int64(binary.LittleEndian.Uint64(p[0:])),
		Size:       int(binary.LittleEndian.Uint32(p[8:])),
		AppendedAt: int64(binary.LittleEndian.Uint64(p[16:])),
		TagMask:    binary.LittleEndian.Uint64(p[24:]),
	}
}

// StartSeq returns the first retained sequence.
func (c *ConsumeLog) StartSeq() int64 { return c.log.Start() / ConsumeRecordSize }

// EndSeq returns the sequence after the last entry readers can see.
func (c *ConsumeLog) EndSeq() int64 { return c.log.End() / ConsumeRecordSize }

// NextSeq returns the sequence the next Append will get, counting entries
// not yet flushed. Only the writer may call it.
func (c *ConsumeLog) NextSeq() int64 { return c.log.Next() / ConsumeRecordSize }

// SeqAtOrAfter returns the first retained sequence whose message lies at or
// after message-log offset off (entries point at increasing offsets), or
// EndSeq if there is none. Retention uses it to drop entries whose messages
// were removed.
func (c *ConsumeLog) SeqAtOrAfter(off int64) (int64, error) {
	return c.Search(c.StartSeq(), func(e ConsumeEntry) bool { return e.Offset >= off })
}

// Search returns the first sequence at or after from (and below EndSeq)
// whose entry satisfies ok, or EndSeq if none does. ok must be false for a
// prefix of the entries and true for the rest: entries are appended at
// increasing offsets and leader-stamped times that never go back, so a
// bound on either is such a condition.
func (c *ConsumeLog) Search(from int64, ok func(ConsumeEntry) bool) (int64, error) {
	lo, hi := max(from, c.StartSeq()), c.EndSeq()
	for lo < hi {
		mid := lo + (hi-lo)/2
		e, err := c.Get(mid)
		if err != nil {
			return 0, err
		}
		if ok(e) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// SeqOf returns the sequence of the entry pointing at message-log offset
// off, found by binary search (entries point at increasing offsets), or -1
// if no retained entry does.
func (c *ConsumeLog) SeqOf(off int64) (int64, error) {
	seq, err := c.SeqAtOrAfter(off)
	if err != nil || seq >= c.EndSeq() {
		return -1, err
	}
	e, err := c.Get(seq)
	if err != nil {
		return -1, err
	}
	if e.Offset != off {
		return -1, nil
	}
	return seq, nil
}
