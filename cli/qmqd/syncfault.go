package main

import (
	"os"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// syncFaultWord is what the sync fault file must hold to fail syncs, so
// that a file left at the path by chance trips nothing.
const syncFaultWord = "EIO"

// fileSyncFault returns the state machine's sync fault hook for
// --sync-fault-file: while path holds the word EIO, every sync of a
// checkpoint's data fails with EIO, as a disk that lost a write-back
// reports it, and the node stops (fail-stop). Read at each sync (one per
// snapshot or retention removal), so no poller runs.
func fileSyncFault(path string, log hclog.Logger) func() error {
	log.Warn("fault injection: checkpoint syncs fail while this file holds "+syncFaultWord, "sync-fault-file", path)
	return func() error {
		b, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(b)) != syncFaultWord {
			return nil
		}
		log.Warn("failing a checkpoint sync (fault injection)", "sync-fault-file", path)
		return syscall.EIO
	}
}
