package fsm

import (
	"path/filepath"

	"github.com/qmqgo/qmq/internal/disk"
)

// A checkpoint makes the logs durable up to the ends it records, in one of
// two ways (FSM.syncfs, decided at Open):
//
//   - One syncfs(2) through the descriptor of the FSM's directory held
//     since Open, however many logs were written. On Linux 5.8 and later
//     it reports the write-back errors met since that descriptor was
//     opened, so it sees a failure to write back a file the file cache
//     has closed since; the cache then closes dirty files without an fsync
//     (logs.Files.DeferEvictionSyncs), which with many subjects saves an
//     fsync per append.
//   - Elsewhere (no syncfs, or a kernel whose syncfs reports nothing) an
//     fsync per file: the cache fsyncs a dirty file before it closes it,
//     a failure becoming its log's sticky error, and the checkpoint fsyncs
//     each file it records.
//
// Either way a failure is a storage failure: the data below the ends may
// be lost, so the replica stops (see persistCheckpoint); a later sync
// that succeeds proves nothing, since a write-back error is reported once.
// The syncs of checkpoints run one at a time (syncCheckpoint), so that
// one racing a sync that met such an error finds the replica stopped.

// syncData makes the data a snapshot records durable: through the links
// it made in staging, or with one syncfs. Config.SyncFault, if set, is
// asked first. Any goroutine.
func (f *FSM) syncData(staging string) error {
	if err := f.syncFault(); err != nil {
		return err
	}
	if f.syncfs {
		return disk.Syncfs(f.dirFile)
	}
	return syncStaged(staging, filepath.Join(f.cfg.Dir, dataDir))
}

// syncLogs makes every log durable on the apply goroutine, for a
// checkpoint written at once (retention's): one syncfs, or an fsync per
// log written.
func (f *FSM) syncLogs() error {
	if err := f.syncFault(); err != nil {
		return err
	}
	if f.syncfs {
		return disk.Syncfs(f.dirFile)
	}
	return f.store.sync()
}

// syncFault is Config.SyncFault's answer, or nil.
func (f *FSM) syncFault() error {
	if f.cfg.SyncFault == nil {
		return nil
	}
	return f.cfg.SyncFault()
}

// syncStaged fsyncs each segment a snapshot linked into staging (through
// the links: they are the same files), then every directory under data.
func syncStaged(staging, data string) error {
	if err := disk.SyncTree(staging, disk.Files); err != nil {
		return err
	}
	return syncTree(data)
}

// kernelRelease is disk.KernelRelease; tests replace it.
var kernelRelease = disk.KernelRelease

// syncfsWorks reports whether a checkpoint can trust one syncfs(2) to make
// its data durable and to report a write-back error met since Open, a
// closed file's included: a kernel with syncfs that reports write-back
// errors (disk.SyncfsReportsWriteBack). On a Linux kernel before 5.8 it
// says why not, once per Open; where there is no syncfs it says nothing.
func (f *FSM) syncfsWorks() bool {
	if !disk.HasSyncfs {
		return false
	}
	release, err := kernelRelease()
	if err == nil && disk.SyncfsReportsWriteBack(release) {
		return true
	}
	f.log.Warn("this kernel's syncfs reports no write-back errors (Linux before 5.8): fsyncing every file it closes "+
		"and every log at a checkpoint instead of one syncfs, which costs more with many subjects",
		"kernel", release, "error", err)
	return false
}
