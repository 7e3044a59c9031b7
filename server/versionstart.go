package server

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/server/raftlog"
)

// checkLogVersions refuses to start a node whose Raft log, past what its
// state machine applied (its checkpoint), holds a SetVersion its build does
// not apply: started, it would stop at that entry. Its checkpoint's
// Number fsm.Open checked already. It reads the entries Raft replays next,
// once more, at start.
func (n *Node) checkLogVersions(store *raftlog.Store) error {
	return checkLogVersions(store, n.fsm.Applied()+1, func(data []byte) error {
		if fsm.CommandType(data[0]) != fsm.CmdSetVersion {
			return nil
		}
		cmd, err := fsm.Decode(data)
		if err != nil {
			return nil // the state machine refuses it alike
		}
		return n.fsm.CheckVersion(cmd.(*fsm.SetVersion).Version)
	})
}

// checkLogVersions runs check on every command entry of store's log from
// index from on, and returns the first error, naming its entry: an entry
// the state machine of this build would stop at.
func checkLogVersions(store *raftlog.Store, from uint64, check func(data []byte) error) error {
	logs := store.Logs()
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("server: reading the raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("server: reading the raft log: %w", err)
	}
	for i := max(first, from); i <= last && i > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return fmt.Errorf("server: reading raft entry %d: %w", i, err)
		}
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			continue
		}
		if err := check(l.Data); err != nil {
			return fmt.Errorf("server: raft entry %d: %w", i, err)
		}
	}
	return nil
}
