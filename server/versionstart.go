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
	logs := store.Logs()
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("server: reading the raft log: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("server: reading the raft log: %w", err)
	}
	for i := max(first, n.fsm.Applied()+1); i <= last && i > 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return fmt.Errorf("server: reading raft entry %d: %w", i, err)
		}
		if l.Type != raft.LogCommand || len(l.Data) == 0 || fsm.CommandType(l.Data[0]) != fsm.CmdSetVersion {
			continue
		}
		cmd, err := fsm.Decode(l.Data)
		if err != nil {
			continue // the state machine refuses it alike
		}
		if err := n.fsm.CheckVersion(cmd.(*fsm.SetVersion).Version); err != nil {
			return fmt.Errorf("server: raft entry %d: %w", i, err)
		}
	}
	return nil
}
