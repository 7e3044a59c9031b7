package fsm

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/binenc"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// A replica and its disk. Before it applies entries, a replica makes sure
// its disk has room for what they may write and Config.DiskReserve more:
// it applies a batch as far as there is room, in turn, and short of room
// for the next entry it waits, applying nothing, until there is (polling
// the disk, logging, and telling Config.OnDiskWait). A full disk therefore
// pauses a replica instead of failing a write halfway through an entry.
// Waiting never changes what is applied, only when: replicas stay
// identical however long each waits.
//
// A write that fails anyway (the disk filled between the check and the
// write, or failed) leaves the replica's logs in a state no other replica
// shares: the replica stops applying for good and calls Config.OnFatal,
// which stops the node; on restart it returns to its last checkpoint and
// replays, waiting for space if the disk is still full. It never carries
// on with a batch half applied.

// ErrStopped means the state machine stopped applying: a write failed (the
// node must be restarted once its disk is sound) or it was interrupted
// while waiting for disk space (the node is closing). Apply answers every
// later entry with it.
var ErrStopped = errors.New("fsm: stopped applying")

// spaceCheckEvery is how often a replica waiting for disk space asks again.
const spaceCheckEvery = 100 * time.Millisecond

// Upper bounds of what applying an entry writes. An entry's messages are
// written once to a log (the message log, or a schedule record and the
// journal), plus fixed-size index records smaller than any message: twice
// the entry's bytes covers both, and entryOverhead covers what any command
// adds (a pull's records in the pull log; a checkpoint retention writes is
// counted apart, see awaitSpace). A Nack also writes a retry record per
// entry it names into the schedule (see nackWrites). A
// Fire names references, not messages: a leader fills one with records of
// at most limits.MaxFireBytes, plus the one that crossed it.
const (
	entryOverhead  = 64 << 10
	maxRecordBytes = limits.MaxMessage + limits.ScheduleRecordHeader + 64
	fireWriteBound = limits.MaxFireBytes + maxRecordBytes
)

// entryWrites bounds the bytes applying e may write.
func (f *FSM) entryWrites(e *raft.Log) int64 {
	if e.Type != raft.LogCommand || len(e.Data) == 0 {
		return 0
	}
	t := CommandType(e.Data[0])
	tl := f.timelineWrites(t, e.Data)
	switch t {
	case CmdFire:
		return min(int64(len(e.Data)/8)*maxRecordBytes, fireWriteBound) + entryOverhead + tl
	case CmdNack:
		return 2*int64(len(e.Data)) + entryOverhead + f.nackWrites(e.Data) + tl
	case CmdAppend:
		return 2*int64(len(e.Data)) + entryOverhead + senderWrites(e.Data) + tl
	}
	return 2*int64(len(e.Data)) + entryOverhead + tl
}

// timelineWrites bounds the timeline records applying a command of type t
// writes (timeline_record.go), each record's header within
// entryOverhead: an Append's sent record names its senders and a run or a
// reference per message, less than its bytes; a Fire's, an entry per
// reference; a consumer command's, a run per sequence it hands out (a
// pull, at most its Max) or finishes (no more than its ranges name nor
// than a window holds; a nack's and an expiry's twice, their own event and
// a dead letter's; a reclaim's twice a window); a dead-letter operation's,
// a run per sequence it names, or per dead letter of the group for all. A
// command that does not decode writes nothing.
func (f *FSM) timelineWrites(t CommandType, data []byte) int64 {
	switch t {
	case CmdAppend:
		return int64(len(data))
	case CmdFire:
		return int64(len(data)/8) * maxFiredBytes
	case CmdReclaim:
		return 2 * int64(f.windowBound) * maxRunBytes
	case CmdPull, CmdAck, CmdNack, CmdExpire:
		// Read no further than the fields the bound needs: every entry
		// is bounded before it is applied, and a pull's or an ack's
		// decoding is most of its cost.
		r := binenc.NewReader(data)
		r.Raw(2 + 8) // type, version, now
		readNames(r)
		if t == CmdPull {
			if n := r.Uvarint(); r.Err() == nil {
				return int64(min(n, limits.MaxPullMessages)) * maxRunBytes
			}
			return 0
		}
		if t != CmdAck || data[1] >= commandVersionEpoch {
			r.Uvarint() // the epoch
		}
		if t == CmdNack {
			r.Int64() // the retry time
		}
		ranges := f.rangeRead(r)
		if r.Err() != nil {
			return 0
		}
		if t != CmdAck {
			ranges *= 2 // and a dead letter's each
		}
		return ranges * maxRunBytes
	case CmdDeadLetters:
	default:
		return 0
	}
	cmd, err := Decode(data)
	if err != nil {
		return 0
	}
	switch c := cmd.(type) {
	case *DeadLetters:
		if c.All {
			return int64(maxDeadPerGroup) * maxRunBytes
		}
		return int64(len(c.Seqs)) * maxRunBytes
	}
	return 0
}

// rangeRead is rangeBound of the ranges r holds next, read in place.
func (f *FSM) rangeRead(r *binenc.Reader) int64 {
	window := int64(f.windowBound)
	n := int64(0)
	for range r.Count(limits.MaxAckRanges) {
		first, last := int64(r.Uvarint()), int64(r.Uvarint())
		if first >= 0 && last >= first {
			n += min(last-first, window) + 1
		}
		if n >= window {
			return window
		}
	}
	return n
}

// rangeBound bounds the sequences ranges name that one consumer holds:
// no more than they name nor than a window (windowBound).
func (f *FSM) rangeBound(ranges []message.AckRange) int64 {
	window := int64(f.windowBound)
	n := int64(0)
	for _, r := range ranges {
		if r.First >= 0 && r.Last >= r.First {
			n += min(r.Last-r.First, window) + 1
		}
		if n >= window {
			return window
		}
	}
	return n
}

// senderWrites bounds what an Append's applications add to its records
// beyond its bytes: a delayed message's schedule record holds its
// application's code, which the entry names once for all its messages
// (version 2), so each message may add the longest code the entry names.
// An entry that does not decode that far adds nothing.
func senderWrites(data []byte) int64 {
	r := binenc.NewReader(data)
	r.Raw(2 + 8) // type, version, now
	if len(data) < 2 || data[1] < commandVersionAppendApps {
		return 0
	}
	longest := 0
	for range r.Count(limits.MaxBatchMessages) {
		longest = max(longest, len(r.Bytes(limits.MaxName)))
		r.Uvarint()
		if data[1] >= commandVersionAppendAddr {
			r.Bytes(limits.MaxAddr)
		}
	}
	n := r.Count(limits.MaxBatchMessages)
	if r.Err() != nil {
		return 0
	}
	return int64(n) * int64(2+longest) // a code of at most limits.MaxName has a 2-byte length
}

// nackWrites bounds the retry records applying a Nack writes into the
// schedule: one per sequence it names that its consumer holds, so no more
// than its ranges name nor than one consumer holds (windowBound),
// each at most maxRetryRecordBytes. A Nack that does not decode writes
// nothing.
func (f *FSM) nackWrites(data []byte) int64 {
	cmd, err := Decode(data)
	c, ok := cmd.(*Nack)
	if err != nil || !ok {
		return 0
	}
	return f.rangeBound(c.Ranges) * maxRetryRecordBytes
}

// awaitSpace returns how many of entries (at least one) the disk has room
// for now, with the reserve, waiting until it has room for the first; or
// false if the state machine was interrupted meanwhile. It holds no lock
// while it waits: readers go on.
func (f *FSM) awaitSpace(entries []*raft.Log) (int, bool) {
	var since, logged time.Time
	for {
		free, err := f.cfg.DiskFree(f.cfg.Dir)
		if err != nil {
			if since.IsZero() {
				f.log.Warn("cannot tell the free disk space; applying", "error", err)
			}
			free = disk.Unknown
		}
		// Retention may write a checkpoint while an append applies: keep
		// room for one (it grows with the state; twice the last one's size).
		n, need := 0, f.cfg.DiskReserve+2*f.checkpointSize
		for n < len(entries) && need+f.entryWrites(entries[n]) <= free {
			need += f.entryWrites(entries[n])
			n++
		}
		if n > 0 {
			if !since.IsZero() {
				f.log.Info("disk space is back: applying again", "free-bytes", free, "waited", time.Since(since).Round(time.Millisecond))
				f.diskWait.Store(false)
				f.notifyDiskWait(false)
			}
			return n, true
		}
		if now := time.Now(); now.Sub(logged) >= 10*time.Second {
			f.log.Error("disk full: applying paused until space is freed", "dir", f.cfg.Dir,
				"free-bytes", free, "need-bytes", need+f.entryWrites(entries[0]), "reserve-bytes", f.cfg.DiskReserve, "index", entries[0].Index)
			logged = now
		}
		if since.IsZero() {
			since = time.Now()
			f.diskWait.Store(true)
			f.notifyDiskWait(true)
		}
		select {
		case <-f.stop:
			return 0, false
		case <-time.After(spaceCheckEvery):
		}
	}
}

func (f *FSM) notifyDiskWait(waiting bool) {
	if f.cfg.OnDiskWait != nil {
		f.cfg.OnDiskWait(waiting)
	}
}

// WaitingForDisk reports whether the state machine is waiting for disk
// space before it applies more. Safe on any goroutine.
func (f *FSM) WaitingForDisk() bool { return f.diskWait.Load() }

// Stopped returns why the state machine stopped applying, or nil.
func (f *FSM) Stopped() error {
	if p := f.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// Interrupt stops a wait for disk space (the node is closing): the batch
// waiting is not applied, nor is any later one. Idempotent.
func (f *FSM) Interrupt() { f.interrupt.Do(func() { close(f.stop) }) }

// stopApplying records why the state machine stops for good and tells
// Config.OnFatal if a write failed.
// Only the first reason counts, and OnFatal is told once. Any goroutine.
func (f *FSM) stopApplying(err error, fatal bool) {
	if !f.broken.CompareAndSwap(nil, &err) {
		return
	}
	switch {
	case fatal && errors.Is(err, ErrNeedsUpgrade):
		f.log.Error("an entry this build cannot apply: this replica stops applying; run a release that applies it "+
			"(it returns to its last checkpoint and replays)", "applied-index", f.applied.Load(), "error", err)
		f.cfg.OnFatal(err)
	case fatal && errors.Is(err, ErrOtherHistory):
		f.log.Error("an entry of another group history: this replica stops applying", "applied-index", f.applied.Load(), "error", err)
		f.cfg.OnFatal(err)
	case fatal:
		f.log.Error("storage failed: this replica stops applying; restart the node once its disk is sound "+
			"(it returns to its last checkpoint and replays)", "applied-index", f.applied.Load(), "error", err)
		f.cfg.OnFatal(err)
	}
}

// storageFailure is what must panics with: a failed write to the logs (or
// an entry of another history, ErrOtherHistory). ApplyBatch recovers it
// and stops the replica.
type storageFailure struct{ err error }

// must returns v, or stops the batch being applied if err is a storage
// failure (see ApplyBatch).
func must[T any](v T, err error) T {
	if err != nil {
		panic(storageFailure{err})
	}
	return v
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		panic(storageFailure{err})
	}
	return a, b
}

// stoppedAnswers answers every entry of a batch that is not applied.
func stoppedAnswers(out []any, err error) []any {
	for i := range out {
		if out[i] == nil {
			out[i] = fmt.Errorf("%w: %w", ErrStopped, err)
		}
	}
	return out
}
