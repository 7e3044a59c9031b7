package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/logs"
)

// Directory layout of a store:
//
//	messages/            the message log
//	index/               the message log's index by message id, a sidecar per sealed segment
//	consume/<subject>/   one consume log per subject
//	pull/                every consumer's pull log, merged
//	schedule/<hour>/     delayed messages by hour of delivery (package delaywheel)
//	journal/             delayed appends in order, for the dedup window
//	timeline/            what commands did to messages (timeline_record.go)
//	timeline-index/      the timeline's index, a sidecar per sealed segment
//	checkpoint           the state made durable at the last snapshot
const (
	messagesDir    = "messages"
	indexDir       = "index"
	consumeDir     = "consume"
	pullDir        = "pull"
	scheduleDir    = "schedule"
	journalDir     = "journal"
	timelineDir    = "timeline"
	tlIndexDir     = "timeline-index"
	checkpointFile = "checkpoint"
)

// maxOpenHours bounds the schedule hours a store keeps open.
const maxOpenHours = 16

// store is the set of logs one FSM writes. The FSM goroutine is its only
// writer; readers on other goroutines use the logs' lock-free reads and the
// consume-log map under mu. Every log opens its segment files through one
// logs.Files, bounded by Config.MaxOpenFiles.
type store struct {
	dir      string
	files    *logs.Files  // the open segment files of every log below
	opts     logs.Options // for consume and pull logs
	messages *logs.MessageLog
	index    *logs.KeyIndex // the message log's records by dedup.HashID of their id
	pulls    *logs.PullLog
	sched    *delaywheel.Schedule
	journal  *delaywheel.Journal
	timeline *logs.Log      // timeline records (timeline_record.go)
	tlIndex  *logs.KeyIndex // the timeline's records by message (indexKey, blockKey)

	mu      sync.RWMutex
	consume map[string]*subjectLog

	touched map[*logs.ConsumeLog]struct{} // consume logs appended to since the last flush
}

// subjectLog is a subject's consume log and the bytes of the messages its
// entries point at (their Size, the message-log records' sizes), from its
// start to its next entry: increased by appendConsume, decreased by
// retention before it removes the log's first segments (retainBytes),
// recorded with the log's end in each checkpoint (see fsm/DESIGN.md,
// "Bytes stored per subject"). Written by the writer under the state lock;
// read under it.
type subjectLog struct {
	cl    *logs.ConsumeLog
	bytes int64
}

// logEnds records where each log ended when a checkpoint was taken.
type logEnds struct {
	messages int64
	pulls    int64
	consume  map[string]int64 // by subject
	// consumeBytes are the bytes each consume log's entries point at (see
	// subjectLog), by subject; nil from a checkpoint before version 7,
	// which did not record them.
	consumeBytes map[string]int64
	journal      int64
	hours        map[int64]delaywheel.HourEnds // the hours holding delayed messages
	timeline     int64
}

// openStore opens the logs in dir. It treats everything below ends (from the
// last checkpoint; all zero when there is none) as durable, cuts every log
// back to them, and removes consume logs of subjects the checkpoint does not
// know: Raft replays whatever came after the checkpoint.
//
// deferSyncs: checkpoints make the logs durable with one syncfs, which
// also reports the write-back errors of files closed since (see
// syncdata.go), so the file cache may close dirty files without an fsync.
func openStore(dir string, cfg Config, ends *logEnds, deferSyncs bool) (*store, error) {
	// One cache of open files for every log of the store: the files open do
	// not grow with subjects, hours or segments.
	files := logs.NewFiles(cfg.MaxOpenFiles)
	if deferSyncs {
		// With more subjects than the cache holds, an fsync per eviction
		// would be an fsync per append on the apply goroutine.
		files.DeferEvictionSyncs()
	}
	s := &store{
		dir:     dir,
		files:   files,
		opts:    logs.Options{SegmentSize: cfg.IndexSegmentSize, Files: files},
		consume: map[string]*subjectLog{},
		touched: map[*logs.ConsumeLog]struct{}{},
	}
	var err error
	msgOpts := logs.Options{SegmentSize: cfg.SegmentSize, DurableEnd: ends.messages, Files: files}
	if s.messages, err = logs.OpenMessageLog(filepath.Join(dir, messagesDir), msgOpts); err != nil {
		return nil, err
	}
	pullOpts := s.opts
	pullOpts.DurableEnd = ends.pulls
	if s.pulls, err = logs.OpenPullLog(filepath.Join(dir, pullDir), pullOpts); err != nil {
		s.close()
		return nil, err
	}
	if err := s.openConsumeLogs(ends); err != nil {
		s.close()
		return nil, err
	}
	if s.sched, err = delaywheel.OpenSchedule(filepath.Join(dir, scheduleDir), maxOpenHours, ends.hours, files); err != nil {
		s.close()
		return nil, err
	}
	journalOpts := s.opts
	journalOpts.DurableEnd = ends.journal
	if s.journal, err = delaywheel.OpenJournal(filepath.Join(dir, journalDir), journalOpts); err != nil {
		s.close()
		return nil, err
	}
	timelineOpts := s.opts
	timelineOpts.DurableEnd = ends.timeline
	if s.timeline, err = logs.Open(filepath.Join(dir, timelineDir), logs.KindTimeline, timelineOpts); err != nil {
		s.close()
		return nil, err
	}
	if err := s.truncate(ends); err != nil {
		s.close()
		return nil, err
	}
	// After the cut, the bytes recorded with the consume logs' ends (see
	// FSM.countStoredBytes for a checkpoint that has none).
	for subject, sl := range s.consume {
		sl.bytes = ends.consumeBytes[subject]
	}
	// After the cut: the indexes cover the logs as they now end.
	if s.index, err = logs.OpenKeyIndex(s.messages.Log(), filepath.Join(dir, indexDir), messageKeys); err != nil {
		s.close()
		return nil, err
	}
	if s.tlIndex, err = logs.OpenKeyIndex(s.timeline, filepath.Join(dir, tlIndexDir), timelineKeys); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *store) openConsumeLogs(ends *logEnds) error {
	entries, err := os.ReadDir(filepath.Join(s.dir, consumeDir))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fsm: list consume logs: %w", err)
	}
	for _, e := range entries {
		subject := e.Name()
		path := filepath.Join(s.dir, consumeDir, subject)
		end, known := ends.consume[subject]
		if !known {
			// Created after the checkpoint: Raft replays the appends that made it.
			if err := os.RemoveAll(path); err != nil {
				return fmt.Errorf("fsm: remove consume log %s: %w", path, err)
			}
			continue
		}
		opts := s.opts
		opts.DurableEnd = end
		cl, err := logs.OpenConsumeLog(path, opts)
		if err != nil {
			return err
		}
		s.consume[subject] = &subjectLog{cl: cl}
	}
	return nil
}

// truncate cuts every log back to ends.
func (s *store) truncate(ends *logEnds) error {
	if err := s.messages.Log().TruncateTo(ends.messages); err != nil {
		return err
	}
	if err := s.pulls.Log().TruncateTo(ends.pulls); err != nil {
		return err
	}
	for subject, sl := range s.consume {
		if err := sl.cl.Log().TruncateTo(ends.consume[subject]); err != nil {
			return err
		}
	}
	if err := s.timeline.TruncateTo(ends.timeline); err != nil {
		return err
	}
	// Schedule hours are cut back when first opened (see OpenSchedule).
	return s.journal.Log().TruncateTo(ends.journal)
}

// setSegmentSizes makes every log roll by new sizes from its next record:
// the message log by segment, the consume and pull logs and the journal by
// index, and consume logs created from now on. Only the writer calls it.
func (s *store) setSegmentSizes(segment, index int64) {
	s.opts.SegmentSize = index
	s.messages.Log().SetSegmentSize(segment)
	s.pulls.Log().SetSegmentSize(index)
	s.journal.Log().SetSegmentSize(index)
	s.timeline.SetSegmentSize(index)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sl := range s.consume { // a map: no order needed
		sl.cl.Log().SetSegmentSize(index)
	}
}

// consumeLog returns the subject's consume log, or nil if it has none.
func (s *store) consumeLog(subject string) *logs.ConsumeLog {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sl := s.consume[subject]; sl != nil {
		return sl.cl
	}
	return nil
}

// appendConsume appends e to the subject's consume log, creating the log
// if needed, counts its message's bytes and returns the entry's sequence.
// Only the writer calls it.
func (s *store) appendConsume(subject string, e logs.ConsumeEntry) (int64, error) {
	s.mu.RLock()
	sl := s.consume[subject]
	s.mu.RUnlock()
	if sl == nil {
		cl, err := logs.OpenConsumeLog(filepath.Join(s.dir, consumeDir, subject), s.opts)
		if err != nil {
			return 0, err
		}
		sl = &subjectLog{cl: cl}
		s.mu.Lock()
		s.consume[subject] = sl
		s.mu.Unlock()
	}
	s.touched[sl.cl] = struct{}{}
	seq, err := sl.cl.Append(e)
	if err == nil {
		sl.bytes += int64(e.Size)
	}
	return seq, err
}

// allStoredBytes returns every consume log's bytes (see subjectLog), by
// subject. The writer, or a reader holding the state lock, calls it.
func (s *store) allStoredBytes() map[string]int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]int64, len(s.consume))
	for subject, sl := range s.consume { // a map: no order needed
		out[subject] = sl.bytes
	}
	return out
}

// storedBytes returns the bytes the subject's consume log points at (see
// subjectLog); 0 if it has none. The writer, or a reader holding the
// state lock, calls it.
func (s *store) storedBytes(subject string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sl := s.consume[subject]; sl != nil {
		return sl.bytes
	}
	return 0
}

// subjects returns the subjects with a consume log, sorted.
func (s *store) subjects() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.consume))
	for subject := range s.consume {
		out = append(out, subject)
	}
	slices.Sort(out)
	return out
}

// all returns every log with its path relative to the store's directory,
// in a fixed order.
func (s *store) all() []namedLog {
	out := []namedLog{{messagesDir, s.messages.Log()}, {pullDir, s.pulls.Log()}, {journalDir, s.journal.Log()}, {timelineDir, s.timeline}}
	for _, subject := range s.subjects() {
		out = append(out, namedLog{filepath.Join(consumeDir, subject), s.consumeLog(subject).Log()})
	}
	return out
}

type namedLog struct {
	rel string
	log *logs.Log
}

// ends returns where every log ends now, the schedule's for hours.
func (s *store) ends(hours map[int64]*hourState) *logEnds {
	e := &logEnds{messages: s.messages.Log().End(), pulls: s.pulls.Log().End(), consume: map[string]int64{},
		journal: s.journal.Log().End(), hours: map[int64]delaywheel.HourEnds{}, timeline: s.timeline.End()}
	s.mu.RLock()
	for subject, sl := range s.consume { // a map: no order needed
		e.consume[subject] = sl.cl.Log().End()
	}
	s.mu.RUnlock()
	for hour := range hours {
		e.hours[hour], _ = s.sched.Ends(hour)
	}
	return e
}

// flush makes every appended record visible to readers.
// Only the writer calls it, after every batch: it touches the message and
// pull logs and the consume logs appended to since the last flush, not
// every subject's.
func (s *store) flush() error {
	if err := s.messages.Log().Flush(); err != nil {
		return err
	}
	if err := s.pulls.Log().Flush(); err != nil {
		return err
	}
	if err := s.timeline.Flush(); err != nil {
		return err
	}
	for cl := range s.touched {
		if err := cl.Log().Flush(); err != nil {
			return err
		}
	}
	clear(s.touched)
	return errors.Join(s.journal.Log().Flush(), s.sched.Flush())
}

// sync makes every log durable.
func (s *store) sync() error {
	for _, l := range s.all() {
		if err := l.log.Sync(); err != nil {
			return err
		}
	}
	if err := s.sched.Sync(); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.dir, consumeDir))
}

// syncDir fsyncs dir, if it exists.
func syncDir(dir string) error {
	err := disk.SyncDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fsm: %w", err)
	}
	return nil
}

func (s *store) close() error {
	var errs []error
	if s.index != nil {
		s.index.Close() // before the log it reads
	}
	if s.tlIndex != nil {
		s.tlIndex.Close()
	}
	if s.timeline != nil {
		errs = append(errs, s.timeline.Close())
	}
	if s.messages != nil {
		errs = append(errs, s.messages.Log().Close())
	}
	if s.pulls != nil {
		errs = append(errs, s.pulls.Log().Close())
	}
	if s.sched != nil {
		errs = append(errs, s.sched.Close())
	}
	if s.journal != nil {
		errs = append(errs, s.journal.Log().Close())
	}
	s.mu.Lock()
	for _, sl := range s.consume {
		errs = append(errs, sl.cl.Log().Close())
	}
	s.mu.Unlock()
	return errors.Join(errs...)
}

// messageKeys gives the key index a message-log record's key: the hash of
// its message's id. A record that does not decode has none.
func messageKeys(p []byte, add func(uint64)) {
	if m, err := message.Decode(p); err == nil {
		add(dedup.HashID(m.ID))
	}
}
