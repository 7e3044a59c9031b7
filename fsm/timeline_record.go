package fsm

import (
	"fmt"
	"slices"

	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
)

// The timeline log holds what commands did to messages, written at apply
// (so every replica writes the same bytes) and read back by Timeline. It
// has three kinds of record, each written once per command that has
// something to say:
//
//	sent:     1 | index uvarint | at u64 | senders uvarint | (app, addr)… |
//	          runs uvarint | (sender uvarint, last-offset uvarint)… |
//	          scheduled uvarint | (sender uvarint, ref u64)…
//	fired:    2 | index uvarint | at u64 | count uvarint |
//	          (offset uvarint, ref u64, sent-index uvarint, sent-at u64, due u64, app)…
//	consumer: 3 | kind u8 | index uvarint | at u64 | subject | group | consumer | app |
//	          runs uvarint | (first-seq uvarint, count uvarint, delivery uvarint, due u64)…
//
// A sent record is an Append's: which application sent each message from
// which address. Its runs cover the messages appended in offset order, a
// message belonging to the first run whose last offset is at or after its
// own; its scheduled entries name delayed messages by schedule reference. It
// is written only for an Append that names senders (version 2 on). A fired
// record is a Fire's: for each message it appended, the schedule entry and
// the Append that sent it. A consumer record is one kind of event of one
// consumer command (a pull, an ack, a nack…) on runs of consume sequences
// of one subject.
//
// The log's key index (a logs.KeyIndex) finds them: a sent or fired record
// by its command's Raft index (which the message's record holds), a
// consumer record by its subject and each sequence of its short runs
// (under shortRun sequences) and each block of 2^timelineBlockBits
// sequences its longer runs touch: a record costs at most a few keys a
// run, and a lookup reads the records naming its sequence and those of
// long runs of its block. Keys are hashes: a lookup confirms each candidate
// by decoding it.
const (
	recSent     = 1
	recFired    = 2
	recConsumer = 3
)

// timelineBlock is how many consume sequences one consumer key covers: a
// record of a run of sequences costs a key per block it touches, not per
// sequence, and a lookup reads the records of its block.
const timelineBlockBits = 8

// maxRunBytes bounds one encoded run of a consumer record (four fields of
// at most 10 bytes), maxFiredBytes one entry of a fired record, and
// maxHeaderBytes a record's fixed fields with four names.
const (
	maxRunBytes    = 40
	maxFiredBytes  = 46 + 2 + limits.MaxName
	maxHeaderBytes = 32 + 4*(2+limits.MaxName)
)

// mixKey spreads x over 64 bits (splitmix64's finalizer).
func mixKey(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// indexKey is the key of the sent and fired records of the command at
// Raft index i.
func indexKey(i uint64) uint64 { return mixKey(i<<1 | 1) }

// blockKey is the key of consumer records whose long runs touch block b
// of subject (hashed as h), seqKey of those whose short runs hold seq.
func blockKey(h uint64, b int64) uint64 { return mixKey(h ^ mixKey(uint64(b)<<1)) }
func seqKey(h uint64, seq int64) uint64 { return mixKey(h ^ mixKey(uint64(seq)<<1|1)) }

// shortRun: a run of fewer sequences is keyed by each of them.
const shortRun = 16

// runKeys appends r's keys to keys.
func runKeys(keys []uint64, h uint64, r tlRun) []uint64 {
	if r.count < shortRun {
		for seq := r.first; seq < r.first+r.count; seq++ {
			keys = append(keys, seqKey(h, seq))
		}
		return keys
	}
	for blk := r.first >> timelineBlockBits; blk <= (r.first+r.count-1)>>timelineBlockBits; blk++ {
		keys = append(keys, blockKey(h, blk))
	}
	return keys
}

// tlRun is consume sequences first..first+count-1, delivered the
// delivery-th time, with due (a retry time, or 0).
type tlRun struct {
	first, count int64
	delivery     uint32
	due          int64
}

// tlPending is what one command recorded of one event kind.
type tlPending struct {
	kind EventKind
	runs []tlRun
}

// timelineWriter gathers what the command being applied does to messages
// and writes it as records when the command is done (commit). Only the
// apply goroutine uses it.
type timelineWriter struct {
	index                        uint64
	at                           int64
	subject, group, consumer, by string
	pending                      []tlPending
	buf                          []byte
	keys                         []uint64
}

// begin starts the command at Raft index.
func (w *timelineWriter) begin(index uint64) {
	w.index, w.at = index, 0
	w.subject, w.group, w.consumer, w.by = "", "", "", ""
	for i := range w.pending {
		w.pending[i].runs = w.pending[i].runs[:0]
	}
	w.pending = w.pending[:0]
}

// on names the consumer (or, for a dead-letter operation, the group and
// who asked) whose events follow, at time at.
func (w *timelineWriter) on(at int64, subject, group, consumer, by string) {
	w.at, w.subject, w.group, w.consumer, w.by = at, subject, group, consumer, by
}

// add records kind for consume sequence seq.
func (w *timelineWriter) add(kind EventKind, seq int64, delivery uint32, due int64) {
	var p *tlPending
	for i := range w.pending {
		if w.pending[i].kind == kind {
			p = &w.pending[i]
			break
		}
	}
	if p == nil {
		if len(w.pending) < cap(w.pending) {
			w.pending = w.pending[:len(w.pending)+1]
			p = &w.pending[len(w.pending)-1]
			p.kind, p.runs = kind, p.runs[:0]
		} else {
			w.pending = append(w.pending, tlPending{kind: kind})
			p = &w.pending[len(w.pending)-1]
		}
	}
	if n := len(p.runs); n > 0 {
		if r := &p.runs[n-1]; r.first+r.count == seq && r.delivery == delivery && r.due == due {
			r.count++
			return
		}
	}
	p.runs = append(p.runs, tlRun{first: seq, count: 1, delivery: delivery, due: due})
}

// commit writes a consumer record per event kind the command recorded.
func (w *timelineWriter) commit(s *store) {
	if len(w.pending) == 0 {
		return
	}
	h := dedup.HashID(w.subject)
	for _, p := range w.pending {
		if len(p.runs) == 0 {
			continue
		}
		b := append(w.buf[:0], recConsumer, byte(p.kind))
		b = binenc.AppendUvarint(b, w.index)
		b = binenc.AppendUint64(b, uint64(w.at))
		b = binenc.AppendString(b, w.subject)
		b = binenc.AppendString(b, w.group)
		b = binenc.AppendString(b, w.consumer)
		b = binenc.AppendString(b, w.by)
		b = binenc.AppendUvarint(b, uint64(len(p.runs)))
		keys := w.keys[:0]
		for _, r := range p.runs {
			b = binenc.AppendUvarint(b, uint64(r.first))
			b = binenc.AppendUvarint(b, uint64(r.count))
			b = binenc.AppendUvarint(b, uint64(r.delivery))
			b = binenc.AppendUint64(b, uint64(r.due))
			keys = runKeys(keys, h, r)
		}
		w.buf = b
		off := must(s.timeline.Append(b))
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			s.tlIndex.Add(off, k)
		}
		w.keys = keys
	}
	w.begin(w.index)
}

// sentRecord gathers an Append's senders while it is applied.
type sentRecord struct {
	senders []Sender // as the Append names them (Apps)
	runs    []sentRun
	sched   []sentSched
}

type sentRun struct {
	sender int // 1 + the index in senders, 0 for none
	last   int64
}

type sentSched struct {
	sender int
	ref    uint64
}

func (r *sentRecord) appended(sender int, off int64) {
	if n := len(r.runs); n > 0 && r.runs[n-1].sender == sender {
		r.runs[n-1].last = off
		return
	}
	r.runs = append(r.runs, sentRun{sender: sender, last: off})
}

// write appends the record of the Append at index.
func (r *sentRecord) write(s *store, index uint64, at int64, buf []byte) []byte {
	b := append(buf[:0], recSent)
	b = binenc.AppendUvarint(b, index)
	b = binenc.AppendUint64(b, uint64(at))
	b = binenc.AppendUvarint(b, uint64(len(r.senders)))
	for _, sd := range r.senders {
		b = binenc.AppendString(binenc.AppendString(b, sd.App), sd.Addr)
	}
	b = binenc.AppendUvarint(b, uint64(len(r.runs)))
	for _, run := range r.runs {
		b = binenc.AppendUvarint(binenc.AppendUvarint(b, uint64(run.sender)), uint64(run.last))
	}
	b = binenc.AppendUvarint(b, uint64(len(r.sched)))
	for _, sc := range r.sched {
		b = binenc.AppendUint64(binenc.AppendUvarint(b, uint64(sc.sender)), sc.ref)
	}
	s.tlIndex.Add(must(s.timeline.Append(b)), indexKey(index))
	return b
}

// firedEntry is one message a Fire appended.
type firedEntry struct {
	offset    int64
	ref       uint64
	sentIndex uint64
	sentAt    int64
	due       int64
	app       string
}

func writeFired(s *store, index uint64, at int64, es []firedEntry, buf []byte) []byte {
	b := append(buf[:0], recFired)
	b = binenc.AppendUvarint(b, index)
	b = binenc.AppendUint64(b, uint64(at))
	b = binenc.AppendUvarint(b, uint64(len(es)))
	for _, e := range es {
		b = binenc.AppendUvarint(b, uint64(e.offset))
		b = binenc.AppendUint64(b, e.ref)
		b = binenc.AppendUvarint(b, e.sentIndex)
		b = binenc.AppendUint64(b, uint64(e.sentAt))
		b = binenc.AppendUint64(b, uint64(e.due))
		b = binenc.AppendString(b, e.app)
	}
	s.tlIndex.Add(must(s.timeline.Append(b)), indexKey(index))
	return b
}

// tlRecord is a decoded timeline record.
type tlRecord struct {
	typ   byte
	index uint64
	at    int64
	// sent
	senders []Sender
	runs    []sentRun
	sched   []sentSched
	// fired
	fired []firedEntry
	// consumer
	kind                         EventKind
	subject, group, consumer, by string
	seqs                         []tlRun
}

// decodeTimelineRecord decodes a timeline record; bytes that are not one
// (a damaged or foreign file) give an error wrapping logs.ErrCorrupt.
func decodeTimelineRecord(p []byte) (*tlRecord, error) {
	r := binenc.NewReader(p)
	rec := &tlRecord{typ: r.Byte()}
	switch rec.typ {
	case recSent:
		rec.index, rec.at = r.Uvarint(), r.Int64()
		rec.senders = make([]Sender, r.Count(limits.MaxBatchMessages))
		for i := range rec.senders {
			rec.senders[i] = Sender{App: r.String(limits.MaxName), Addr: r.String(limits.MaxAddr)}
		}
		n := r.Count(limits.MaxBatchMessages)
		for i := 0; i < n && r.Err() == nil; i++ {
			run := sentRun{sender: int(min(r.Uvarint(), 1<<31)), last: int64(min(r.Uvarint(), 1<<62))}
			rec.runs = append(rec.runs, run)
		}
		n = r.Count(limits.MaxBatchMessages)
		for i := 0; i < n && r.Err() == nil; i++ {
			rec.sched = append(rec.sched, sentSched{sender: int(min(r.Uvarint(), 1<<31)), ref: r.Uint64()})
		}
	case recFired:
		rec.index, rec.at = r.Uvarint(), r.Int64()
		n := r.Count(limits.MaxFireRefs)
		for i := 0; i < n && r.Err() == nil; i++ {
			e := firedEntry{offset: int64(min(r.Uvarint(), 1<<62)), ref: r.Uint64(), sentIndex: r.Uvarint()}
			e.sentAt, e.due, e.app = r.Int64(), r.Int64(), r.String(limits.MaxName)
			rec.fired = append(rec.fired, e)
		}
	case recConsumer:
		rec.kind = EventKind(r.Byte())
		rec.index, rec.at = r.Uvarint(), r.Int64()
		rec.subject, rec.group, rec.consumer, rec.by = r.String(limits.MaxName), r.String(limits.MaxName), r.String(limits.MaxName), r.String(MaxBy)
		n := r.Count(maxTimelineRuns)
		total := int64(0)
		for i := 0; i < n && r.Err() == nil; i++ {
			run := tlRun{first: int64(min(r.Uvarint(), 1<<62)), count: int64(min(r.Uvarint(), 1<<62))}
			run.delivery, run.due = uint32(min(r.Uvarint(), 1<<32-1)), r.Int64()
			if total += run.count; run.count < 1 || total > maxRecordSeqs {
				return nil, fmt.Errorf("%w: timeline runs of more than %d sequences", logs.ErrCorrupt, maxRecordSeqs)
			}
			rec.seqs = append(rec.seqs, run)
		}
	default:
		return nil, fmt.Errorf("%w: timeline record of type %d", logs.ErrCorrupt, rec.typ)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: timeline record: %w", logs.ErrCorrupt, err)
	}
	return rec, nil
}

// maxTimelineRuns bounds the runs a consumer record may hold, and
// maxRecordSeqs the sequences of all its runs: no command writes more (a
// dead-letter operation names at most a group's dead letters,
// maxDeadPerGroup; an ack at most a consumer's window,
// limits.MaxMaxUnacked), so that a damaged record costs its reader, and
// the index's rebuild, a bounded time.
const (
	maxTimelineRuns = 1 << 18
	maxRecordSeqs   = 1 << 21
)

// timelineKeys gives the timeline's key index a record's keys (to rebuild
// a segment's index): those commit and write added.
func timelineKeys(p []byte, add func(uint64)) {
	rec, err := decodeTimelineRecord(p)
	if err != nil {
		return
	}
	switch rec.typ {
	case recSent, recFired:
		add(indexKey(rec.index))
	case recConsumer:
		h := dedup.HashID(rec.subject)
		var keys []uint64
		for _, r := range rec.seqs {
			keys = runKeys(keys, h, r)
		}
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			add(k)
		}
	}
}
