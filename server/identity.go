package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/server/raftlog"
)

// ErrHistory means a node's state machine data, its Raft store and its
// configuration do not belong to one Raft history (a directory copied in,
// re-created or half removed); the node refuses to start.
var ErrHistory = errors.New("server: data directory does not match this group's history")

// identityKey is where a broker node's Raft stable store keeps its group's
// identity (see fsm/identity.go).
var identityKey = []byte("qmq-group-identity")

// rejoin is what every ErrHistory tells an operator to do.
const rejoin = "to rebuild this node, remove it from its group (qmqctl leave --broker-group G --id ID), " +
	"empty its --data directory, start it again and add it with qmqctl join"

// raftStoreEmpty reports whether s holds neither a term nor a log entry:
// a new node's store, or one removed. Its snapshots do not count: a store
// emptied beside its snapshots has forgotten the node's votes all the same.
func raftStoreEmpty(s *raftlog.Store) (bool, error) {
	has, err := raft.HasExistingState(s.Logs(), s.Stable(), raft.NewInmemSnapshotStore())
	if err != nil {
		return false, fmt.Errorf("server: check raft state: %w", err)
	}
	return !has, nil
}

// storedIdentity returns the identity in the node's stable store, or "".
func storedIdentity(stable raft.StableStore) (string, error) {
	b, err := stable.Get(identityKey)
	if err != nil && err.Error() != "not found" {
		return "", fmt.Errorf("server: read the group identity from the raft store: %w", err)
	}
	return string(b), nil
}

// checkIdentity refuses to start a broker node whose state machine, Raft
// store and configuration name different groups or different histories
// of one: a state machine, or a Raft store, copied from another group or
// from another life of this one. Call it before fsm.CatchUp, which would
// otherwise replace a state machine copied in by a snapshot of the Raft
// store's history and hide the mistake.
func (n *Node) checkIdentity() error {
	data := n.cfg.DataDir
	own := n.fsm.Identity()
	stored, err := storedIdentity(n.raftGroup.store.Stable())
	if err != nil {
		return err
	}
	for _, id := range []string{own, stored} {
		if id != "" && fsm.IdentityBrokerGroup(id) != n.cfg.BrokerGroup {
			return refuseHistory("the data in %s belongs to group %q, this node is configured for group %q",
				data, fsm.IdentityBrokerGroup(id), n.cfg.BrokerGroup)
		}
	}
	if own != "" && stored != "" && own != stored {
		return refuseHistory("the state machine in %s belongs to group history %s, the raft store to %s",
			filepath.Join(data, "fsm"), own, stored)
	}
	return nil
}

func refuseHistory(format string, args ...any) error {
	return fmt.Errorf("%w: %s; %s", ErrHistory, fmt.Sprintf(format, args...), rejoin)
}

// checkHistory refuses to start a broker node whose state machine and
// Raft store cannot be one history, before Raft starts on them:
//
//   - state machine data (an applied index) with an empty Raft store: the
//     Raft log and votes were removed or the state machine copied in; the
//     node would serve entries it cannot prove, and vote as a newcomer;
//   - a state machine past the Raft store's last entry: its data is of
//     another history, and it would skip entries Raft still has to apply
//     (silently on a follower; a leader panics);
//   - no snapshot and a Raft log that starts past what the state machine
//     applied: the entries between are gone.
//
// A Raft store that holds state but no identity (a node that has not
// applied it yet, or a directory from before identities) takes the state
// machine's. Call it after fsm.CatchUp.
func (n *Node) checkHistory(snaps raft.SnapshotStore) error {
	store, data := n.raftGroup.store, n.cfg.DataDir
	fsmDir := filepath.Join(data, "fsm")
	empty, err := raftStoreEmpty(store)
	if err != nil {
		return err
	}
	applied := n.fsm.Applied()
	if empty {
		if applied > 0 {
			return refuseHistory("the state machine in %s has applied index %d but the raft store in %s is empty "+
				"(removed, or the state machine copied in)", fsmDir, applied, data)
		}
		return nil
	}
	last, err := store.Logs().LastIndex()
	if err != nil {
		return fmt.Errorf("server: read the raft log: %w", err)
	}
	first, err := store.Logs().FirstIndex()
	if err != nil {
		return fmt.Errorf("server: read the raft log: %w", err)
	}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("server: list snapshots: %w", err)
	}
	var snapIndex uint64
	if len(metas) > 0 {
		snapIndex = metas[0].Index
	}
	if applied > max(last, snapIndex) {
		return refuseHistory("the state machine in %s has applied index %d, past the raft store's last entry %d "+
			"(its data is of another history)", fsmDir, applied, max(last, snapIndex))
	}
	if len(metas) == 0 && first > 1 && applied+1 < first {
		return refuseHistory("the raft log starts at index %d with no snapshot before it, and the state machine in %s "+
			"has applied only %d (entries %d to %d are gone)", first, fsmDir, applied, applied+1, first-1)
	}
	stored, err := storedIdentity(store.Stable())
	if err != nil {
		return err
	}
	if own := n.fsm.Identity(); stored == "" && own != "" {
		n.storeIdentity(own)
	}
	return nil
}

// storeIdentity keeps the group identity the state machine recorded in
// the node's Raft stable store (fsm.Config.OnIdentity, and checkHistory
// for a store without one). One that holds another is left as it is and
// logged: the next start refuses.
func (n *Node) storeIdentity(id string) {
	stable := n.raftGroup.store.Stable()
	stored, err := storedIdentity(stable)
	switch {
	case err != nil:
		n.log.Error("keeping the group identity", "identity", id, "error", err)
	case stored == id:
	case stored != "":
		n.log.Error("the state machine recorded another group identity than the raft store holds",
			"identity", id, "stored", stored)
	default:
		if err := stable.Set(identityKey, []byte(id)); err != nil {
			n.log.Error("keeping the group identity", "identity", id, "error", err)
			return
		}
		n.log.Info("group identity", "identity", id)
	}
}

// recordIdentity, run by a new leader once it has applied what came before
// its term, records a group identity if the group has none: a new group's
// first leader, or a group from before identities. It rides on a SetMember
// of the leader's own address, which changes nothing else.
func (n *Node) recordIdentity(ctx context.Context) {
	if !n.caughtUp(ctx) {
		return
	}
	if n.fsm.Identity() != "" {
		return
	}
	id, err := fsm.NewIdentity(n.cfg.BrokerGroup)
	if err != nil {
		n.log.Warn("recording the group identity", "error", err)
		return
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	// The address announce records too, so neither undoes the other.
	cmd := (&fsm.SetMember{ID: n.cfg.ID, ClientAddr: n.clientAddr}).Encode()
	if _, err := n.proposeWith(ctx, cmd, fsm.IdentityExtension(id)); err != nil {
		n.log.Warn("recording the group identity", "error", err)
	}
}
