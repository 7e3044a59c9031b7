package fsm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/delaywheel"
	"github.com/qmqgo/qmq/fsm/dedup"
	"github.com/qmqgo/qmq/internal/disk"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/logs"
)

// Config configures an FSM. Start from DefaultConfig. The settings that
// decide what apply does (SegmentSize, IndexSegmentSize, DedupWindow,
// MaxUnacked, MaxPull, Retention) are this node's own values of its broker
// group's configuration (BrokerConfig), which is replicated state: apply
// goes by the group's, so nodes started with different values apply alike.
// A node's values are what it proposes as the configuration of a group
// that has none, when it leads (the server does), and what it applies by
// for a state written before the group configuration existed (a
// checkpoint of version 4 or earlier, which it applied by them). The
// others (Dir, MaxOpenFiles, the disk settings, the callbacks) are each
// node's own: they change when apply runs, not what it does.
type Config struct {
	// Dir holds the FSM's logs and checkpoint (in Dir/data) and its snapshot
	// staging area; it must be on the same file system as the snapshot store,
	// which hard-links segments.
	Dir string
	// SegmentSize is this node's message-log segment size (see
	// BrokerConfig). Default 64 MiB.
	SegmentSize int64
	// IndexSegmentSize is this node's segment size of the consume and pull
	// logs and the journal. Default 4 MiB.
	IndexSegmentSize int64
	// DedupWindow is this node's dedup window: how long a message id is
	// remembered so that a retried send is not appended twice, in
	// leader-stamped time. Default 10 minutes.
	DedupWindow time.Duration
	// MaxUnacked is this node's bound of the entries one consumer may hold
	// unacked; a pull beyond it returns nothing until acks arrive. Default
	// 10,000.
	MaxUnacked int
	// MaxPull is this node's cap of one pull. Default 1,000.
	MaxPull int
	// Retention is this node's retention: sealed message-log segments
	// removed by age and total size. Default: keep everything.
	Retention logs.Retention
	// MaxOpenFiles bounds the segment files the FSM keeps open, across all
	// its logs (message, pull, journal, every subject's consume log and the
	// open schedule hours): beyond it the least recently used idle ones are
	// closed (fsynced first if written since their last fsync) and reopened
	// when next read. Files in use at once may exceed it briefly. The
	// process's file limit (RLIMIT_NOFILE) must leave room above it for
	// Raft, connections and directories. At least 16. Default 1,024.
	MaxOpenFiles int
	// Logger receives the FSM's logs. Default: a null logger.
	Logger hclog.Logger
	// DiskFree reports the bytes free on the file system holding a path;
	// Restore asks it before writing a snapshot's files, and every batch
	// before it is applied. Default disk.Free.
	DiskFree disk.Probe
	// DiskReserve is the space a replica keeps free beyond what a batch
	// may write: short of it, it waits before applying (see diskspace.go).
	// Default 64 MiB.
	DiskReserve int64
	// OnDiskWait, if set, is told when the state machine starts waiting
	// for disk space (true) and when it applies again (false); called on
	// the apply goroutine, it must not block.
	OnDiskWait func(waiting bool)
	// OnFatal is told that storage failed: a write to the logs, or a sync
	// or write of a checkpoint (a lost write-back is reported to one sync
	// only, so a replica that went on would later record lost bytes as
	// durable). The state machine stopped applying for good and the node
	// must stop (on restart it replays from its last checkpoint). Called
	// once, on the apply goroutine or on Raft's snapshot goroutine (a
	// snapshot's Persist). Default: panic.
	OnFatal func(error)
	// OnIdentity, if set, is told the group identity an applied entry
	// recorded in the state (once per group life; see identity.go), on the
	// apply goroutine once the entry is applied.
	OnIdentity func(id string)
	// OnApplied, if set, is told of every command entry applied (not those
	// skipped as applied before, nor configuration and no-op entries), on
	// the apply goroutine right after it: its index and command type, when
	// the state machine began applying it and how long that took. The
	// entries of a batch are timed each, one after the other; the batch's
	// single flush of the logs to readers, after its last entry, is in
	// none. It must not block. For metrics: the server's
	// qmq_apply_seconds, and the end of qmq_commit_seconds. (It is not
	// handed the *raft.Log: a pointer passed to a function value escapes,
	// which would cost an entry built on the stack an allocation.)
	OnApplied func(index uint64, cmd CommandType, began time.Time, took time.Duration)
	// SyncFault is fault injection, nil in production: if set, every sync
	// of a checkpoint's data asks it first, and an error it returns is that
	// sync's, as a disk's lost write-back would be (qmqd
	// --sync-fault-file).
	SyncFault func() error
	// Group is the broker group's name, for the messages of a replica
	// that stops because it cannot apply the group's entries ("" for
	// none).
	Group string
	// MaxVersion is the newest version Number this replica applies; 0
	// means this build's, version.Max. A test sets a lower one to play a
	// replica of an earlier release: it then stops at an entry that needs
	// a higher Number, as that release would, and refuses to open a state
	// past it.
	MaxVersion version.Number
}

// DefaultConfig returns the defaults documented on Config, for dir.
func DefaultConfig(dir string) Config {
	return Config{
		Dir:              dir,
		SegmentSize:      limits.DefaultSegmentSize,
		IndexSegmentSize: limits.DefaultIndexSegmentSize,
		DedupWindow:      limits.DefaultDedupWindow,
		MaxUnacked:       limits.DefaultMaxUnacked,
		MaxPull:          limits.DefaultMaxPull,
		MaxOpenFiles:     1024,
		Logger:           hclog.NewNullLogger(),
		DiskFree:         disk.Free,
		DiskReserve:      SpaceReserve,
		OnFatal:          func(err error) { panic(fmt.Sprintf("fsm: stopped applying: %v", err)) },
	}
}

// BrokerConfig returns this node's values of the broker group
// configuration. A dedup window is kept in whole milliseconds, a fraction
// dropped, as apply always took it.
func (c Config) BrokerConfig() BrokerConfig {
	return BrokerConfig{RetentionAge: c.Retention.MaxAge, RetentionBytes: c.Retention.MaxBytes, DedupWindow: c.DedupWindow.Milliseconds(),
		MaxPull: c.MaxPull, MaxUnacked: c.MaxUnacked, SegmentSize: c.SegmentSize, IndexSegmentSize: c.IndexSegmentSize}
}

// Validate reports a setting that cannot work: of the broker group
// configuration, a value outside its own bounds (those of internal/limits;
// whether the values agree with each other is the server's to check,
// before this node proposes them).
func (c Config) Validate() error {
	if c.Dir == "" {
		return errors.New("fsm: config: Dir is empty")
	}
	if c.Retention.MaxAge < 0 || c.Retention.MaxBytes < 0 {
		return errors.New("fsm: config: negative retention")
	}
	if c.DedupWindow < 0 {
		return fmt.Errorf("fsm: config: dedup-window %s is negative", c.DedupWindow)
	}
	if err := c.BrokerConfig().checkFields(); err != nil {
		return fmt.Errorf("fsm: config: %w", err)
	}
	switch {
	case c.MaxOpenFiles < minOpenFiles:
		return fmt.Errorf("fsm: config: MaxOpenFiles %d is below %d", c.MaxOpenFiles, minOpenFiles)
	case c.Logger == nil:
		return errors.New("fsm: config: Logger is nil")
	case c.DiskFree == nil || c.OnFatal == nil:
		return errors.New("fsm: config: DiskFree and OnFatal must be set")
	case c.DiskReserve < 0:
		return fmt.Errorf("fsm: config: DiskReserve %d is negative", c.DiskReserve)
	}
	return nil
}

// minOpenFiles is the least MaxOpenFiles: a few files of each kind of log
// in use at once.
const minOpenFiles = 16

const (
	dataDir    = "data"
	restoreDir = "restore"
	oldDir     = "data.old"
	stagingDir = "staging"
)

// FSM is a broker group's replicated state machine: it applies Raft
// commands to the message, consume and pull logs. Raft calls Apply,
// ApplyBatch, Snapshot and Restore from one goroutine; the read methods may
// be called from any goroutine.
type FSM struct {
	cfg Config
	log hclog.Logger

	mu      sync.RWMutex // held for writing only while Restore swaps the store
	store   *store
	stateMu sync.RWMutex // held for writing while a batch applies; readers of st take it
	st      *state
	dedup   *dedup.Window // ids appended to the message log
	// delayedDedup holds ids scheduled for later, by schedule reference.
	delayedDedup *dedup.Refs
	// emptied are hours swept from the state, removed after the next checkpoint.
	emptied []int64
	// scheduled are the entries the batch being applied scheduled, for
	// onSchedule once they are readable.
	scheduled  []delaywheel.Entry
	onSchedule atomic.Pointer[func(delaywheel.Entry)]
	// firstLive caches firstRetained per subject; retention clears it.
	firstLive map[string]int64
	// tl gathers the timeline records of the command being applied.
	tl timelineWriter
	// tlBuf is the buffer sent and fired records are encoded in.
	tlBuf []byte
	// subjects are those with messages or delayed messages pending
	// (derived from the logs and the state; never shrinks).
	subjects map[string]struct{}
	// flagsWarned: this node's own configuration was found to differ from
	// its group's, and said so (warnFlags).
	flagsWarned bool
	// windowBound is at least the entries any consumer's window holds
	// (state.windowBound, as of the load or the last configuration
	// change), for the space a Nack may take. Derived.
	windowBound int

	applied  atomic.Uint64
	snapshot atomic.Uint64 // names staging directories
	// version is st.version (the group's active Number as recorded, 0 for
	// none), for readers off the apply goroutine.
	version atomic.Uint32

	checkpointSize int64 // bytes of the last checkpoint written (FSM goroutine only)
	// syncMu makes the syncs of checkpoints' data, by Persist and by
	// retention, one at a time (see syncCheckpoint).
	syncMu sync.Mutex
	// ckptMu orders the writes of the checkpoint file: by Persist, by
	// retention and by Restore (see pendingCheckpoint).
	ckptMu    sync.Mutex
	ckptIndex uint64                            // the applied index of the checkpoint written last
	restores  uint64                            // Restores so far: a snapshot taken before one is never written
	cleanup   atomic.Pointer[pendingCheckpoint] // written by Persist, to clean after on the apply goroutine
	// dirFile is cfg.Dir, open from Open to Close, for syncData.
	dirFile *os.File
	// syncfs: a checkpoint's data is made durable with one syncfs through
	// dirFile, whose write-back errors it reports (see syncdata.go).
	syncfs bool
	// learned is an identity the batch being applied recorded, for
	// OnIdentity once it is applied.
	learned string
	// rename is os.Rename; tests replace it to fail a restore's swap.
	rename func(from, to string) error
	// retentionStep, if set (by tests), is told of each step of a
	// retention removal as it completes (see removeBefore).
	retentionStep func(step string)
	// syncWaits, if set (by tests), is told that a checkpoint's sync waits
	// for another's to finish (see syncCheckpoint).
	syncWaits func()

	diskWait  atomic.Bool           // waiting for disk space before applying
	broken    atomic.Pointer[error] // why applying stopped for good; nil while it goes on
	stop      chan struct{}         // closed by Interrupt
	interrupt sync.Once
}

var (
	_ raft.FSM         = (*FSM)(nil)
	_ raft.BatchingFSM = (*FSM)(nil)
)

// Open opens (or creates) the FSM in cfg.Dir at the state of its last
// checkpoint; Raft replays what was applied after it.
func Open(cfg Config) (*FSM, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &FSM{cfg: cfg, log: cfg.Logger.Named("fsm"), stop: make(chan struct{}), rename: os.Rename}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsm: create %s: %w", cfg.Dir, err)
	}
	if err := f.finishRestore(); err != nil {
		return nil, err
	}
	os.RemoveAll(filepath.Join(cfg.Dir, stagingDir)) // released snapshots' links
	dirFile, err := os.Open(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("fsm: open %s: %w", cfg.Dir, err)
	}
	f.dirFile = dirFile
	f.syncfs = f.syncfsWorks()
	if err := f.load(filepath.Join(cfg.Dir, dataDir)); err != nil {
		dirFile.Close()
		return nil, err
	}
	f.ckptIndex = f.st.applied
	f.log.Info("opened", "applied-index", f.st.applied, "message-log-end", f.store.messages.Log().End())
	return f, nil
}

// finishRestore completes a Restore that crashed, or failed, while
// swapping directories: a restore directory holding a checkpoint is
// complete and replaces the data. Without one, data moved aside (data.old)
// with nothing in its place is put back; an empty state machine there
// would skip every entry Raft does not replay.
func (f *FSM) finishRestore() error {
	data, restore := filepath.Join(f.cfg.Dir, dataDir), filepath.Join(f.cfg.Dir, restoreDir)
	old := filepath.Join(f.cfg.Dir, oldDir)
	_, complete := os.Stat(filepath.Join(restore, checkpointFile))
	if _, err := os.Stat(data); complete != nil && errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(old); err == nil {
			f.log.Warn("putting back the data a restore moved aside", "dir", old)
			if err := os.Rename(old, data); err != nil {
				return fmt.Errorf("fsm: finish restore: %w", err)
			}
		}
	}
	if complete == nil {
		f.log.Info("completing the swap of a restored snapshot", "dir", restore)
		if err := os.RemoveAll(data); err != nil {
			return fmt.Errorf("fsm: finish restore: %w", err)
		}
		if err := os.Rename(restore, data); err != nil {
			return fmt.Errorf("fsm: finish restore: %w", err)
		}
	}
	for _, leftover := range []string{restore, old} {
		if err := os.RemoveAll(leftover); err != nil {
			return fmt.Errorf("fsm: remove %s: %w", leftover, err)
		}
	}
	return nil
}

// load opens the store in dir at its checkpoint and rebuilds what the
// checkpoint does not hold (the dedup window).
func (f *FSM) load(dir string) error {
	cp, err := readCheckpoint(dir)
	if err != nil {
		return err
	}
	if err := f.checkVersion(cp.st); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, checkpointFile), err)
	}
	f.adoptNodeConfig(cp)
	s, err := openStore(dir, f.storeConfig(cp.st.config.BrokerConfig), cp.ends, f.syncfs)
	if err != nil {
		return err
	}
	d, delayed, err := rebuildDedup(s, cp)
	if err != nil {
		s.close()
		return err
	}
	f.store, f.st, f.dedup, f.delayedDedup, f.firstLive = s, cp.st, d, delayed, map[string]int64{}
	if st, err := os.Stat(filepath.Join(dir, checkpointFile)); err == nil {
		f.checkpointSize = st.Size()
	}
	f.subjects = map[string]struct{}{}
	for _, subject := range s.subjects() {
		f.subjects[subject] = struct{}{}
	}
	for subject := range cp.st.delayed {
		f.subjects[subject] = struct{}{}
	}
	f.emptied = nil
	f.windowBound = cp.st.windowBound()
	if cp.st.config.source == ConfigGroup {
		f.warnFlags(cp.st.config.BrokerConfig)
	}
	if err := f.finishRemoval(cp); err != nil {
		s.close()
		f.store = nil
		return err
	}
	if cp.ends.consumeBytes == nil && len(s.consume) > 0 {
		start := time.Now()
		if err := f.countStoredBytes(); err != nil {
			s.close()
			f.store = nil
			return err
		}
		f.log.Info("counted the bytes stored per subject, which a checkpoint before version 7 does not record",
			"subjects", len(s.consume), "took", time.Since(start))
	}
	f.applied.Store(cp.st.applied)
	f.version.Store(uint32(cp.st.version))
	return nil
}

// rebuildDedup rebuilds the dedup windows the checkpoint cp does not hold,
// of the window of its configuration: ids appended to the message log
// since the oldest the window held (fired delayed messages are not counted
// again: their ids entered the window when they were scheduled), and ids
// scheduled within the window and not before its floor, from the journal.
func rebuildDedup(s *store, cp *checkpoint) (*dedup.Window, *dedup.Refs, error) {
	window := cp.st.config.DedupWindow
	d, delayed := dedup.NewWindow(window), dedup.NewRefs(window)
	if cp.dedupFrom >= 0 {
		from := max(cp.dedupFrom, s.messages.Log().Start())
		err := s.messages.Scan(from, func(off int64, size int, m *message.Message) error {
			if m.DeliverAt == 0 {
				d.Add(m.ID, m.AppendedAt, off)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("fsm: rebuild dedup window: %w", err)
		}
		d.Expire(cp.st.now)
	}
	err := s.journal.Since(max(cp.st.now-window, cp.st.config.dedupFloor), func(e delaywheel.JournalEntry) error {
		delayed.AddHash(e.Hash, e.AppendedAt, dedup.Seen{Offset: int64(e.Ref)})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("fsm: rebuild dedup window of delayed messages: %w", err)
	}
	return d, delayed, nil
}

// Close closes the logs. It does not checkpoint: Raft replays what was
// applied after the last snapshot.
func (f *FSM) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.store == nil {
		return nil
	}
	err := errors.Join(f.store.close(), f.dirFile.Close())
	f.store = nil
	return err
}

// Applied returns the index of the last Raft entry applied.
func (f *FSM) Applied() uint64 { return f.applied.Load() }

// Apply applies one Raft entry.
func (f *FSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch applies committed Raft entries in order. Entries at or below
// the applied index (replayed after a restart) are skipped. It applies
// them as far as the disk has room, waiting for more where it has none
// (see diskspace.go). A failed write to the logs stops the replica for
// good (the bytes on disk are unknown, and stopping is better than a
// replica that silently differs): Apply answers ErrStopped from then on
// and Config.OnFatal stops the node; on restart it returns to its
// checkpoint and replays.
func (f *FSM) ApplyBatch(entries []*raft.Log) []any {
	out := make([]any, len(entries))
	for start := 0; start < len(entries); {
		if err := f.Stopped(); err != nil {
			return stoppedAnswers(out, err)
		}
		n, ok := f.awaitSpace(entries[start:])
		if !ok {
			err := errors.New("interrupted while waiting for disk space")
			f.stopApplying(err, false)
			return stoppedAnswers(out, err)
		}
		f.applyEntries(entries[start:start+n], out[start:start+n])
		start += n
	}
	if id := f.learned; id != "" {
		f.learned = ""
		if f.cfg.OnIdentity != nil {
			f.cfg.OnIdentity(id)
		}
	}
	return out
}

// applyEntries applies entries, answering each in out, and makes what
// they wrote readable.
func (f *FSM) applyEntries(entries []*raft.Log, out []any) {
	f.stateMu.Lock()
	defer f.stateMu.Unlock()
	f.cleanAfterCheckpoint()
	defer func() {
		if r := recover(); r != nil {
			sf, ok := r.(storageFailure)
			if !ok {
				panic(r)
			}
			f.stopApplying(sf.err, true)
			stoppedAnswers(out, sf.err)
		}
	}()
	observe := f.cfg.OnApplied
	var began time.Time
	for i, e := range entries {
		if e.Index <= f.st.applied {
			continue
		}
		if observe != nil {
			began = time.Now()
		}
		hour := delaywheel.Hour(f.st.now)
		if e.Type == raft.LogCommand {
			if len(e.Extensions) > 0 {
				if err := f.applyIdentity(e); err != nil {
					panic(storageFailure{err}) // stops the replica, this entry unapplied
				}
			}
			out[i] = f.applyCommand(e)
		}
		if delaywheel.Hour(f.st.now) != hour {
			f.sweepHours(f.st.now)
		}
		f.st.applied = e.Index
		if _, ok := out[i].(*AppendResult); ok {
			// Once the entry is wholly applied: retention may checkpoint.
			f.retain(f.st.now)
		}
		if observe != nil && e.Type == raft.LogCommand && len(e.Data) > 0 {
			observe(e.Index, CommandType(e.Data[0]), began, time.Since(began))
		}
	}
	must(0, f.store.flush())
	f.applied.Store(f.st.applied)
	f.announceScheduled()
}

// applyCommand is the one place a command is dispatched to its handler.
func (f *FSM) applyCommand(e *raft.Log) any {
	cmd, err := Decode(e.Data)
	if errors.Is(err, ErrUnknownCommand) {
		f.unknownCommand(e, err) // stops the replica, this entry unapplied
	}
	if err != nil {
		// The same bytes fail alike on every replica: refused, nothing changed.
		return fmt.Errorf("%w: entry %d: %w", ErrInvalid, e.Index, err)
	}
	if err := f.gate(e, cmd); err != nil {
		return err
	}
	f.tl.begin(e.Index)
	res := f.dispatch(e, cmd)
	// What the command recorded of consumers' events, once it is wholly
	// applied: a storage failure (a panic) writes nothing more. Below
	// version 2 the group keeps no timeline.
	if f.writesTimeline() {
		f.tl.commit(f.store)
	}
	return res
}

// dispatch applies a decoded command.
func (f *FSM) dispatch(e *raft.Log, cmd any) any {
	switch c := cmd.(type) {
	case *Append:
		return f.applyAppend(e.Index, c)
	case *Pull:
		return f.applyPull(c)
	case *Ack:
		return f.applyAck(c)
	case *Reclaim:
		return f.applyReclaim(c)
	case *SetMember:
		return f.applySetMember(c)
	case *Fire:
		return f.applyFire(e.Index, c)
	case *Forget:
		return f.applyForget(c)
	case *Nack:
		return f.applyNack(c)
	case *Extend:
		return f.applyExtend(c)
	case *Expire:
		return f.applyExpire(c)
	case *SetConsumerGroup:
		return f.applySetGroup(c)
	case *ResetConsumerGroup:
		return f.applyResetGroup(c)
	case *DeadLetters:
		return f.applyDeadLetters(c)
	case *SetBrokerConfig:
		return f.applySetBrokerConfig(e.Index, c)
	case *SetVersion:
		return f.applySetVersion(c)
	}
	panic(fmt.Sprintf("fsm: entry %d: no handler for %T", e.Index, cmd))
}
